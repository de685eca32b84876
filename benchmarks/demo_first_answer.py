"""How long a newcomer waits for the demo: the first cited answer, and the whole corpus in.

Usage: python benchmarks/demo_first_answer.py [--root PATH] [--demo-dir PATH] [--name demo_first_answer]

Runs ``python manage.py demo --no-serve`` (README command one without the server) as a subprocess
in a fresh, empty data directory (``KB_DATA_DIR``: a new embedded PostgreSQL, migrations, the
embedder's export), with ``KB_DEMO_DIR`` at ``--demo-dir`` (default ``.kb-demo``): when that holds
the Django download already, pip is not run, so the figures are the time from the installed
environment to the answer. ``--root`` runs another checkout of the project (e.g. a ``git worktree``
of an older commit) with this interpreter. Each stdout line is timestamped from the start:

* ``first_answer_s``: the ``Q:`` line (the example question's cited answer is printed below it);
* ``ready_s``: the ``Ready in`` line (the portal would start here);
* ``all_sources_s``: the ``All … sources in`` line, or the process exit when the demo prints none
  (a demo that syncs everything before answering); None when it failed;
* ``exit_s``: the process exit; ``returncode``; ``load_average``: the 1-minute load before and after;
* ``cpu_s``: the demo process's CPU seconds at each mark and at its exit (all its threads;
  not the embedded PostgreSQL's), a figure a busy machine bends less than the wall times.

Prints one JSON object, also written to benchmarks/results/<name>.json.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _setup import ROOT
from _toolkit import log


def cpu_seconds(pid: int) -> float | None:
    """CPU time (user + system, all threads) process ``pid`` used so far, from /proc; None elsewhere."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def postgres_stop(pgdata: Path) -> None:
    """Stop the embedded PostgreSQL the demo left running in ``pgdata`` (a fast shutdown, SIGINT)."""
    pidfile = pgdata / "postmaster.pid"
    if pidfile.exists():
        try:
            os.kill(int(pidfile.read_text().split()[0]), signal.SIGINT)
        except (ProcessLookupError, ValueError):
            pass


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", type=Path, default=ROOT, help="the project checkout to run (default: this one)")
    parser.add_argument("--demo-dir", type=Path, default=ROOT / ".kb-demo", help="KB_DEMO_DIR: the download")
    parser.add_argument("--name", default="demo_first_answer")
    args = parser.parse_args()

    data = Path(tempfile.mkdtemp(prefix="kb-demo-bench-"))
    env = {
        **os.environ,
        "KB_DATA_DIR": str(data),
        "KB_DEMO_DIR": str(args.demo_dir.resolve()),
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "TOKENIZERS_PARALLELISM": "false",
        "PYTHONUNBUFFERED": "1",
    }
    env.pop("CELERY_BROKER_URL", None)
    load_before = os.getloadavg()[0]
    marks: dict[str, float] = {}
    lines: list[str] = []
    started = time.perf_counter()
    proc = subprocess.Popen(
        [sys.executable, "manage.py", "demo", "--no-serve"],
        cwd=args.root,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    assert proc.stdout is not None
    cpu: dict[str, float | None] = {}
    for line in proc.stdout:
        at = time.perf_counter() - started
        lines.append(line.rstrip("\n"))
        text = line.strip()
        mark = None
        if text.startswith("Q:"):
            mark = "first_answer_s"
        elif text.startswith("Ready in"):
            mark = "ready_s"
        elif text.startswith("All ") and " sources in" in text:
            mark = "all_sources_s"
        if mark and mark not in marks:
            marks[mark], cpu[mark] = at, cpu_seconds(proc.pid)
            log(f"{at:7.1f}s {text}")
    returncode = proc.wait()
    children = resource.getrusage(resource.RUSAGE_CHILDREN)  # the demo (and what it waited for), reaped
    exit_s = time.perf_counter() - started
    postgres_stop(data / "pgdata")
    result = {
        "benchmark": args.name,
        "command": "python manage.py demo --no-serve (fresh KB_DATA_DIR, KB_DEMO_DIR with the download)",
        "root": str(args.root.resolve()),
        "first_answer_s": round(marks["first_answer_s"], 1) if "first_answer_s" in marks else None,
        "ready_s": round(marks["ready_s"], 1) if "ready_s" in marks else None,
        "all_sources_s": (
            round(marks["all_sources_s"], 1)
            if "all_sources_s" in marks
            else round(exit_s, 1)
            if returncode == 0
            else None
        ),
        "exit_s": round(exit_s, 1),
        # The demo process's own CPU seconds at each mark (the embedded PostgreSQL's not included):
        # less bent by other work on a shared machine than the wall times.
        "cpu_s": {
            k: None if v is None else round(v, 1)
            for k, v in {**cpu, "exit": children.ru_utime + children.ru_stime}.items()
        },
        "returncode": returncode,
        "cpu_count": os.cpu_count(),
        "load_average": {"before": round(load_before, 2), "after": round(os.getloadavg()[0], 2)},
        "data_dir": str(data),
        "tail": lines[-12:],
    }
    out = json.dumps(result, indent=2, ensure_ascii=False)
    print(out)
    results = ROOT / "benchmarks" / "results"
    results.mkdir(parents=True, exist_ok=True)
    (results / f"{args.name}.json").write_text(out + "\n")


if __name__ == "__main__":
    main()
