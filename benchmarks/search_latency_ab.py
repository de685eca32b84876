"""Search latency of two revisions of the code, alternated run by run on one database.

Usage: python benchmarks/search_latency_ab.py --base REV [--runs 8] [--rounds 3] [--tenant demo]

Checks out ``REV`` (any git revision) into a temporary worktree that shares this checkout's
``.venv`` and ``KB_DATA_DIR``, then runs ``benchmarks/search_latency.py`` from the base tree and
from this tree in turn, ``runs`` times each (base, this, base, this, ...), so both see the same
machine load and caches. Prints one JSON object: per tree the hybrid p50 and p95 (ms) of every
run and their medians, and ``hybrid_p50_ratio`` (this tree's median over the base's).

The base revision's code reads the database as migrated by this tree: use it for revisions whose
models map to the same tables (a state-only migration is fine). Exits non-zero with git's or the
benchmark's message when a checkout or a run fails.
"""

from __future__ import annotations

import argparse
import json
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base", required=True, help="the git revision to compare this tree with")
    parser.add_argument("--runs", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--tenant", default="demo")
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
            for _ in range(args.runs):
                runs["base"].append(latency_run(base, rounds=args.rounds, tenant=args.tenant))
                runs["this"].append(latency_run(HERE, rounds=args.rounds, tenant=args.tenant))
        finally:
            subprocess.run(["git", "worktree", "remove", "--force", str(base)], cwd=HERE, capture_output=True)

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
