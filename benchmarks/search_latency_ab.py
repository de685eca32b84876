"""Search latency of two revisions of the code, alternated run by run on one database.

Usage: python benchmarks/search_latency_ab.py --base REV [--runs 8] [--rounds 3] [--tenant demo] [--outside]

Checks out ``REV`` (any git revision) into a temporary worktree that shares this checkout's
``.venv`` and ``KB_DATA_DIR``, then runs ``benchmarks/search_latency.py`` from the base tree and
from this tree in turn, ``runs`` times each (base, this, base, this, ...), so both see the same
machine load and caches. Prints one JSON object: per tree the hybrid p50 and p95 (ms) of every
run and their medians, and ``hybrid_p50_ratio`` (this tree's median over the base's).

``--outside`` runs ``stages_latency.py --outside`` instead (this tree's copy of it, in both trees,
so both measure alike: it uses only APIs the base shares) and prints, per tree and caller, the
medians over the runs of the total p50, the ranking stages' p50 (``stages_ms``), each step's p50
(``step_<stage>``), the retrieve step's, the scope step's and the untraced time's p50, and the
ratios ``total_over_stages`` and ``total_over_retrieve``.

The base revision's code reads the database as migrated by this tree: use it for revisions whose
models map to the same tables (a state-only migration, or a column the base's code never reads,
is fine). Exits non-zero with git's or the benchmark's message when a checkout or a run fails.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent.parent


def latency_run(tree: Path, *, rounds: int, tenant: str) -> dict:
    """One ``search_latency.py`` run from ``tree``: its hybrid p50 and p95 in ms."""
    done = subprocess.run(
        [str(HERE / ".venv/bin/python"), "benchmarks/search_latency.py", "--rounds", str(rounds), "--tenant", tenant],
        cwd=tree,
        capture_output=True,
        text=True,
    )
    if done.returncode != 0:
        sys.exit(f"search_latency.py failed in {tree}:\n{done.stderr[-2000:]}")
    hybrid = json.loads(done.stdout)["modes"]["hybrid"]
    return {"p50_ms": hybrid["p50_ms"], "p95_ms": hybrid["p95_ms"]}


# The measuring scripts copied into the base tree for --outside (they import each other).
MEASURING = ("_setup.py", "search_latency.py", "stages_latency.py")
OUTSIDE_KEYS = ("stages_ms", "retrieve_ms", "scope_ms", "untraced_ms")


def outside_run(tree: Path, *, rounds: int, tenant: str) -> dict:
    """One ``stages_latency.py --outside`` run from ``tree``: per caller, the p50s in ms and
    ``total_over_stages_p50``."""
    done = subprocess.run(
        [str(HERE / ".venv/bin/python"), "benchmarks/stages_latency.py", "--outside"]
        + ["--rounds", str(rounds), "--tenant", tenant],
        cwd=tree,
        capture_output=True,
        text=True,
    )
    if done.returncode != 0:
        sys.exit(f"stages_latency.py --outside failed in {tree}:\n{done.stderr[-2000:]}")
    measured = json.loads(done.stdout)
    return {
        caller: {
            "total": figures["total"]["p50_ms"],
            **{key: figures[key]["p50_ms"] for key in OUTSIDE_KEYS},
            **{f"step_{stage}": step["p50_ms"] for stage, step in figures["steps"].items()},
            "total_over_stages": figures["total_over_stages_p50"],
            "total_over_retrieve": figures["total_over_retrieve_p50"],
            "load": measured["load_average_1min"]["end"],
        }
        for caller, figures in measured["callers"].items()
    }


def outside_summary(runs: list[dict]) -> dict:
    """Per caller, the median over ``runs`` of each p50 (ms) and ratio (a step a run lacks counts 0)."""
    callers = runs[0].keys()
    return {
        caller: {
            f"{key}_p50_median": round(statistics.median(run[caller].get(key, 0.0) for run in runs), 3)
            for key in sorted({key for run in runs for key in run[caller]} - {"load"})
        }
        for caller in callers
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base", required=True, help="the git revision to compare this tree with")
    parser.add_argument("--runs", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--tenant", default="demo")
    parser.add_argument("--outside", action="store_true", help="compare where the time goes (stages_latency --outside)")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="kb-base-") as scratch:
        base = Path(scratch) / "tree"
        checkout = subprocess.run(
            ["git", "worktree", "add", "--detach", str(base), args.base], cwd=HERE, capture_output=True, text=True
        )
        if checkout.returncode != 0:
            sys.exit(f"Cannot check out {args.base!r}: {checkout.stderr.strip()}")
        try:
            (base / ".venv").symlink_to(HERE / ".venv")
            runs: dict[str, list[dict]] = {"base": [], "this": []}
            if args.outside:
                for name in MEASURING:
                    shutil.copyfile(HERE / "benchmarks" / name, base / "benchmarks" / name)
            measure = outside_run if args.outside else latency_run
            for _ in range(args.runs):
                runs["base"].append(measure(base, rounds=args.rounds, tenant=args.tenant))
                runs["this"].append(measure(HERE, rounds=args.rounds, tenant=args.tenant))
        finally:
            subprocess.run(["git", "worktree", "remove", "--force", str(base)], cwd=HERE, capture_output=True)

    if args.outside:
        output = {
            "base_revision": args.base,
            "runs": args.runs,
            "rounds": args.rounds,
            "tenant": args.tenant,
            "cpu_count": os.cpu_count(),
            "load_average_1min_per_run": {
                name: [next(iter(r.values()))["load"] for r in v] for name, v in runs.items()
            },
            "base": outside_summary(runs["base"]),
            "this": outside_summary(runs["this"]),
            "runs_detail": runs,
        }
        print(json.dumps(output, indent=2))
        return
    output: dict = {"base_revision": args.base, "runs": args.runs, "rounds": args.rounds, "tenant": args.tenant}
    for name, measured in runs.items():
        output[name] = {
            "hybrid_p50_ms": [run["p50_ms"] for run in measured],
            "hybrid_p50_median_ms": round(statistics.median(run["p50_ms"] for run in measured), 2),
            "hybrid_p95_median_ms": round(statistics.median(run["p95_ms"] for run in measured), 2),
        }
    output["hybrid_p50_ratio"] = round(
        output["this"]["hybrid_p50_median_ms"] / output["base"]["hybrid_p50_median_ms"], 3
    )
    print(json.dumps(output, indent=2))


if __name__ == "__main__":
    main()
