"""Search throughput against the primary alone and with one streaming replica on the same host.

Usage:
  python benchmarks/replica_search.py [--steps 20,40] [--seconds 20] [--workers 2] [--threads 4]

The same server and clients as ``benchmarks/load.py --capacity --endpoints search`` (gunicorn with
the production settings, ``--workers`` x ``--threads``, the ``load-bench`` tenant with the HotpotQA
dev50 corpus, one API token per client, the query-embedding cache off, no LLM), run twice: with
``DATABASE_REPLICA_URLS`` unset (every search reads the embedded primary) and set to a hot standby
of it started here with ``pg_basebackup -R`` (``scripts/replica_postgres.py``, a Unix socket in
``KB_DATA_DIR/replica``, left running for the next run), so searches read the replica
(``core.replicas``). Both servers run on this machine: on a small one the replica adds work
(WAL replay, its own backends, the health checks) and takes no load off anything, so this
measures what the routing costs, not what a replica on its own host would add.

Prints one JSON object (also written to ``benchmarks/results/replica_search.json``): per layout and
client count, requests per second, p50/p95/p99 in ms and errors, and how many rows the replica's
database returned in that window (``replica_tup_returned``: 0 when nothing read from it).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import threading
import time

from _setup import ROOT, django_setup
from _toolkit import free_port, log
from load import Recorder, client_loop, load_run, server_start, server_stop, tenant_prepare


def _replica_postgres():
    spec = importlib.util.spec_from_file_location("replica_postgres", ROOT / "scripts" / "replica_postgres.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _tup_returned(url: str) -> int:
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        return int(
            conn.execute("SELECT tup_returned FROM pg_stat_database WHERE datname = current_database()").fetchone()[0]
        )


def layout_run(*, replica_url: str | None, members, questions, args) -> dict:
    """Start gunicorn (with ``DATABASE_REPLICA_URLS=replica_url`` when given), warm it, and measure
    search at each step; returns ``{"at_<n>_clients": {...}}``."""
    if replica_url:
        os.environ["DATABASE_REPLICA_URLS"] = replica_url
    else:
        os.environ.pop("DATABASE_REPLICA_URLS", None)
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    server = server_start(port, args.workers, args.threads, query_cache=False)
    figures: dict = {}
    try:
        warm, stop = Recorder(), threading.Event()
        warmers = [
            threading.Thread(target=client_loop, args=(base, members[i], questions, stop, warm, i, "search"))
            for i in range(args.workers * args.threads)
        ]
        for t in warmers:
            t.start()
        time.sleep(10)
        stop.set()
        for t in warmers:
            t.join()
        for n in args.steps:
            before = _tup_returned(replica_url) if replica_url else 0
            run = load_run(base, members, questions, clients=n, seconds=args.seconds, only="search")
            search = run["endpoints"].get("search", {})
            figures[f"at_{n}_clients"] = {
                "rps": run["throughput_rps"],
                "p50_ms": search.get("p50_ms"),
                "p95_ms": search.get("p95_ms"),
                "p99_ms": search.get("p99_ms"),
                "answered": search.get("count", 0),
                "errors": run["errors"],
                "first_errors": run["first_errors"][:3],
                "load_average_1min": run["load_average_1min"],
                "replica_tup_returned": (_tup_returned(replica_url) - before) if replica_url else 0,
            }
            log(f"{'replica' if replica_url else 'primary'} at {n} clients: {figures[f'at_{n}_clients']}")
    finally:
        server_stop(server)
        os.environ.pop("DATABASE_REPLICA_URLS", None)
    return figures


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", default="20,40", help="client counts, comma-separated")
    parser.add_argument("--seconds", type=float, default=20, help="the window of each step")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--threads", type=int, default=4)
    args = parser.parse_args()
    args.steps = [int(n) for n in args.steps.split(",")]
    django_setup()
    from django.conf import settings
    from django.core.management import call_command
    from django.db import connections

    call_command("migrate", verbosity=0)
    members, _, questions, facts = tenant_prepare(max(args.steps))
    primary = connections["default"].settings_dict
    conninfo = f"host={primary['HOST']} user={primary['USER']} dbname={primary['NAME']}"
    if primary["PORT"]:
        conninfo += f" port={primary['PORT']}"
    connections.close_all()
    replica_dir = settings.KB_DATA_DIR / "replica"
    replica_url = _replica_postgres().replica_start(
        replica_dir, primary=conninfo, port=int(os.environ.get("KB_PG_REPLICA_PORT", "55433")), socket=True
    )
    layouts = {
        "primary_alone": layout_run(replica_url=None, members=members, questions=questions, args=args),
        "with_one_replica": layout_run(replica_url=replica_url, members=members, questions=questions, args=args),
    }
    output = {
        "server": f"gunicorn gthread (config/gunicorn_conf.py), {args.workers} workers x {args.threads} threads, "
        "127.0.0.1; the primary and the replica on the same host (Unix sockets)",
        "cpus": os.cpu_count(),
        "tenant": {"slug": "load-bench", **facts},
        "endpoint": "POST /api/v1/search/ (hybrid, k=10, the query-embedding cache off)",
        "steps_seconds": args.seconds,
        "layouts": layouts,
    }
    text = json.dumps(output, indent=2)
    print(text)
    results = ROOT / "benchmarks" / "results"
    results.mkdir(exist_ok=True)
    (results / "replica_search.json").write_text(text + "\n")


if __name__ == "__main__":
    main()
