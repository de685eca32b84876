"""Load test through the real HTTP server: mixed traffic, or search and ask capacity apart.

Usage:
  python benchmarks/load.py [--seconds 60] [--clients 50] [--workers 2] [--threads 4]
  python benchmarks/load.py --capacity [--steps 20,40] [--seconds 20] [--endpoints search,ask]

Starts gunicorn with the production settings (``config/gunicorn_conf.py``: gthread workers,
persistent database connections, one embedder thread per call) as ``--workers`` x ``--threads`` on
a free port of 127.0.0.1, against this process's ``KB_DATA_DIR`` (its embedded PostgreSQL), with
no LLM (answers are extractive), no broker (an upload's ingestion job runs in the uploading
request's worker, as in the demo) and ``KB_API_RATE`` raised so the per-user throttle does not
trip. Variables of this process reach the server, so ``KB_DB_CONN_MAX_AGE=0 KB_EMBED_THREADS=0
KB_CONCURRENT_RETRIEVERS=true ... --threads 8`` reproduces the layout before those settings. The tenant ``load-bench`` holds the
HotpotQA distractor dev50 corpus (``../shared/datasets/hotpotqa``, about 500 Wikipedia
paragraphs; ingested once, reused on later runs) and one API token per client.

Mixed (default): ``--clients`` threads, each with its own token and keep-alive connection,
alternate ``POST /api/v1/ask/`` and ``POST /api/v1/search/`` with the dataset's questions as fast
as the server answers, while one more thread uploads a small Markdown document every second
(``POST /api/v1/documents/``) and polls its job (``GET /api/v1/jobs/<id>/``) until it is done.

``--capacity``: search alone, then ask alone, each at every client count of ``--steps`` for
``--seconds``, with no uploads and the query-embedding cache off (the dataset has only 50
questions, so with the cache every search would skip the model; ``--query-cache`` keeps it).
Each endpoint's ``saturation_rps`` is its best throughput over the steps; p95 at 20 clients is in
``at_20_clients``.

Every step also reports the CPU the server's process tree and the database's (the embedded
server's postmaster and its backends) spent per answered request, and ``cpu_bound_rps``: the
machine's cores divided by that cost, the throughput the same work would reach if nothing else ran
on the machine. Latency includes the client's queueing on the server, so it measures saturation,
not an idle request; the machine's 1-minute load average before and at the end of each window is
reported, since other work on it slows every figure.

Prints one JSON object (also written to ``benchmarks/results/<--output>``, default ``load.json``):
requests per second, p50/p95/p99 latency in ms per endpoint, the error count (any non-2xx answer
or failed request; the first ten are listed) and, mixed, the uploads whose jobs finished ``done``.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
from collections import defaultdict
from pathlib import Path

from _setup import ROOT, django_setup
from _toolkit import free_port, percentile

TENANT = "load-bench"
HOTPOTQA = Path(os.environ.get("KB_BENCH_DATASETS", ROOT.parent / "shared" / "datasets")) / "hotpotqa"


def tenant_prepare(clients: int) -> tuple[list[str], str, list[str], dict]:
    """The benchmark tenant with the HotpotQA corpus, ``clients`` member tokens and one editor token.

    Returns (member tokens, editor token, questions, corpus facts).
    """
    from rest_framework.authtoken.models import Token

    from core.models import Membership, Tenant
    from core.services import membership_create, tenant_create
    from knowledge.models import Chunk, Document
    from knowledge.services import documents_ingest, source_get_or_create
    from quality.importers import dataset_load

    dataset = dataset_load(name="hotpotqa", paths=sorted(HOTPOTQA.glob("*.json")))
    tenant = Tenant.objects.filter(slug=TENANT).first() or tenant_create(slug=TENANT)
    source = source_get_or_create(tenant=tenant, name="hotpotqa")
    started = time.perf_counter()
    documents_ingest(tenant=tenant, source=source, documents=dataset.documents)  # unchanged -> nothing new
    ingest_s = time.perf_counter() - started

    def token(username: str, role: str) -> str:
        user = membership_create(tenant=tenant, username=username, password=os.urandom(16).hex(), role=role)
        return Token.objects.get_or_create(user=user)[0].key

    members = [token(f"load-member-{i}", Membership.Role.MEMBER) for i in range(clients)]
    editor = token("load-editor", Membership.Role.EDITOR)
    facts = {
        "documents": Document.objects.for_tenant(tenant).filter(source=source).count(),
        "chunks": Chunk.objects.for_tenant(tenant).count(),
        "corpus_ingest_s": round(ingest_s, 1),
    }
    return members, editor, [j.question for j in dataset.judgments], facts


def server_start(port: int, workers: int, threads: int, *, query_cache: bool = True) -> subprocess.Popen:
    """gunicorn serving ``config.wsgi`` on ``port`` with the production settings
    (``config/gunicorn_conf.py``) but ``workers`` x ``threads``; returns once it answers or raises.

    ``query_cache=False`` turns the query-embedding cache off (``KB_QUERY_EMBED_CACHE=0``), so every
    request embeds its question. Other variables of this process (``KB_DB_CONN_MAX_AGE``,
    ``KB_EMBED_THREADS``) reach the server.
    """
    env = {
        **os.environ,
        "KB_API_RATE": "1000000/min",
        "KB_LLM_MODEL": "",
        "CELERY_BROKER_URL": "",
        "REDIS_URL": "",
        "DEBUG": "false",
        "KB_WEB_WORKERS": str(workers),
        "KB_WEB_THREADS": str(threads),
        # torch (if loaded) uses one intra-op thread per call: the request threads already fill the cores.
        "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1"),
    }
    if not query_cache:
        env["KB_QUERY_EMBED_CACHE"] = "0"
    command = [
        sys.executable,
        "-m",
        "gunicorn",
        "-c",
        str(ROOT / "config" / "gunicorn_conf.py"),
        f"--bind=127.0.0.1:{port}",
        "config.wsgi:application",
    ]
    process = subprocess.Popen(command, cwd=ROOT, env=env, start_new_session=True)
    import requests

    try:
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline:
            if process.poll() is not None:
                raise SystemExit(f"gunicorn exited with {process.returncode}")
            try:
                if requests.get(f"http://127.0.0.1:{port}/login/", timeout=30).status_code == 200:
                    return process
            except requests.RequestException:  # not listening yet, or busy loading
                time.sleep(0.5)
        raise SystemExit("gunicorn did not answer within 180 s")
    except BaseException:
        server_stop(process)
        raise


def server_stop(process: subprocess.Popen) -> None:
    if process.poll() is None:
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()


def tree_cpu_s(pid: int | None) -> float:
    """CPU seconds (user + system) used so far by process ``pid``, its live descendants and the
    children it has reaped (PostgreSQL's closed backends); 0.0 when ``pid`` is None or gone."""
    import psutil

    if pid is None:
        return 0.0
    try:
        root = psutil.Process(pid)
        own = root.cpu_times()
        total = own.user + own.system + own.children_user + own.children_system
        for child in root.children(recursive=True):
            try:
                times = child.cpu_times()
                total += times.user + times.system
            except psutil.NoSuchProcess:  # exited meanwhile: counted in its parent's children times
                pass
        return total
    except psutil.NoSuchProcess:
        return 0.0


def postmaster_pid() -> int | None:
    """The pid of the embedded PostgreSQL server of this ``KB_DATA_DIR`` (None with ``DATABASE_URL``)."""
    from django.conf import settings

    pidfile = Path(settings.KB_DATA_DIR) / "pgdata" / "postmaster.pid"
    if os.environ.get("DATABASE_URL") or not pidfile.exists():
        return None
    return int(pidfile.read_text().split()[0])


class Recorder:
    """Latencies (ms) per endpoint and the errors seen, shared by the client threads."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.latencies: dict[str, list[float]] = defaultdict(list)
        self.errors: list[str] = []
        self.error_count = 0
        self.window_end = float("inf")  # perf_counter() when the clients were told to stop
        self.in_window = 0  # answers (any status) received before window_end

    def record(self, endpoint: str, started: float, status: int | None, detail: str = "") -> None:
        now = time.perf_counter()
        ms = (now - started) * 1000
        with self.lock:
            self.in_window += now <= self.window_end
            if status is not None and 200 <= status < 300:
                self.latencies[endpoint].append(ms)
                return
            self.error_count += 1
            if len(self.errors) < 10:
                self.errors.append(f"{endpoint}: {status or 'no response'} {detail[:200]}")


def client_loop(
    base: str,
    token: str,
    questions: list[str],
    stop: threading.Event,
    rec: Recorder,
    seed: int,
    only: str | None = None,
):
    """Send requests until ``stop``: ``ask`` and ``search`` alternately, or only ``only`` of them."""
    import requests

    rng = random.Random(seed)
    session = requests.Session()
    session.headers["Authorization"] = f"Token {token}"
    turn = seed % 2
    while not stop.is_set():
        question = rng.choice(questions)
        kind = only or ("ask" if turn % 2 == 0 else "search")
        endpoint, body = (kind, {"question": question}) if kind == "ask" else (kind, {"query": question, "k": 10})
        turn += 1
        started = time.perf_counter()
        try:
            response = session.post(f"{base}/api/v1/{endpoint}/", json=body, timeout=300)
        except requests.RequestException as exc:
            rec.record(endpoint, started, None, repr(exc))
            continue
        rec.record(endpoint, started, response.status_code, response.text)


def upload_loop(base: str, token: str, stop: threading.Event, rec: Recorder, done: list[float]):
    """Upload a small new document every second; wait on each job before the next."""
    import requests

    session = requests.Session()
    session.headers["Authorization"] = f"Token {token}"
    number = 0
    while not stop.is_set():
        tick = time.monotonic()
        number += 1
        stamp = f"{time.time_ns()}-{number}"
        text = (
            f"# Load note {stamp}\n\nThis note {stamp} was uploaded by the load benchmark. "
            "It says that the canteen opens at eight and closes at three on weekdays.\n"
        ).encode()
        started = time.perf_counter()
        try:
            response = session.post(
                f"{base}/api/v1/documents/",
                files={"file": (f"note-{stamp}.md", text, "text/markdown")},
                data={"source": "load-uploads"},
                timeout=300,
            )
            rec.record("upload", started, response.status_code, response.text)
            if response.status_code == 202:
                job_url = base + response.json()["urls"]["self"]
                while True:
                    polled = time.perf_counter()
                    job = session.get(job_url, timeout=300)
                    rec.record("job", polled, job.status_code, job.text)
                    status = job.json().get("status") if job.status_code == 200 else "failed"
                    if status in ("done", "failed"):
                        break
                    time.sleep(0.2)
                if status == "done":
                    done.append((time.perf_counter() - started) * 1000)
                else:
                    rec.record("job", started, 0, f"job ended {status}: {job.text}")
        except requests.RequestException as exc:
            rec.record("upload", started, None, repr(exc))
        stop.wait(max(0.0, 1.0 - (time.monotonic() - tick)))


def load_run(
    base: str,
    members: list[str],
    questions: list[str],
    *,
    clients: int,
    seconds: float,
    only: str | None = None,
    editor: str | None = None,
    seed: int = 1000,
    cpu_pids: dict[str, int | None] | None = None,
) -> dict:
    """``clients`` client threads (``only`` one endpoint, or both alternately) for ``seconds``, plus
    the upload thread when ``editor`` is given. Returns the window's figures: ``seconds``,
    ``drain_s``, ``load_average_1min``, ``throughput_rps`` (answers within the window, per second),
    ``requests``, per-endpoint ``count``/``p50_ms``/``p95_ms``/``p99_ms``, ``errors``,
    ``first_errors`` and, with uploads, ``uploads_done`` and ``upload_to_done_p50_ms``.

    ``cpu_pids`` (``{"server": gunicorn's pid, "database": the postmaster's}``) adds
    ``cpu_ms_per_request``: the CPU milliseconds those process trees spent in the window per answer,
    and ``cpu_bound_rps``: the requests per second the machine's cores would serve at that cost if
    nothing else ran on them (the figure the machine's other work does not move much)."""
    rec = Recorder()
    stop = threading.Event()
    uploads_done: list[float] = []
    threads = [
        threading.Thread(target=client_loop, args=(base, members[i], questions, stop, rec, seed + i, only))
        for i in range(clients)
    ]
    if editor is not None:
        threads.append(threading.Thread(target=upload_loop, args=(base, editor, stop, rec, uploads_done)))
    cpu_pids = cpu_pids or {}
    load_before = os.getloadavg()
    cpu_before = {name: tree_cpu_s(pid) for name, pid in cpu_pids.items()}
    started = time.perf_counter()
    for t in threads:
        t.start()
    time.sleep(seconds)
    rec.window_end = time.perf_counter()
    cpu_used = {name: tree_cpu_s(pid) - cpu_before[name] for name, pid in cpu_pids.items()}
    stop.set()
    load_after = os.getloadavg()
    for t in threads:
        t.join()
    elapsed = rec.window_end - started
    requests_ok = sum(len(v) for v in rec.latencies.values())
    figures = {
        "clients": clients,
        "seconds": round(elapsed, 1),
        "drain_s": round(time.perf_counter() - rec.window_end, 1),  # requests in flight at the end (counted)
        "load_average_1min": {"before": round(load_before[0], 1), "end": round(load_after[0], 1)},
        "requests": requests_ok + rec.error_count,
        "throughput_rps": round(rec.in_window / elapsed, 2),  # answers received within the window
        "endpoints": {
            name: {
                "count": len(times),
                "p50_ms": round(percentile(times, 50), 1),
                "p95_ms": round(percentile(times, 95), 1),
                "p99_ms": round(percentile(times, 99), 1),
            }
            for name, times in sorted(rec.latencies.items())
        },
        "errors": rec.error_count,
        "first_errors": rec.errors,
    }
    if cpu_pids and rec.in_window:
        per_request = {name: used * 1000 / rec.in_window for name, used in cpu_used.items()}
        figures["cpu_ms_per_request"] = {name: round(ms, 1) for name, ms in per_request.items()}
        figures["cpu_bound_rps"] = round((os.cpu_count() or 1) * 1000 / sum(per_request.values()), 1)
    if editor is not None:
        figures["uploads_done"] = len(uploads_done)
        figures["upload_to_done_p50_ms"] = round(percentile(uploads_done, 50), 1)
    return figures


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=60, help="the window (mixed), or each step (--capacity)")
    parser.add_argument("--clients", type=int, default=50)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--threads", type=int, default=4)
    parser.add_argument(
        "--capacity",
        action="store_true",
        help="search alone, then ask alone, at each of --steps clients (no uploads); the query cache off",
    )
    parser.add_argument("--steps", default="20,40", help="client counts of --capacity, comma-separated")
    parser.add_argument("--endpoints", default="search,ask", help="what --capacity measures, comma-separated")
    parser.add_argument("--query-cache", action="store_true", help="keep the query-embedding cache on in --capacity")
    parser.add_argument("--output", default="load.json", help="file name under benchmarks/results/")
    args = parser.parse_args()
    steps = [int(n) for n in args.steps.split(",")] if args.capacity else [args.clients]
    endpoints = [e for e in args.endpoints.split(",") if e]
    if not set(endpoints) <= {"search", "ask"}:
        parser.error("--endpoints takes search and/or ask")
    django_setup()
    from django.core.management import call_command
    from django.db import connections

    call_command("migrate", verbosity=0)  # a fresh KB_DATA_DIR works too
    members, editor, questions, facts = tenant_prepare(max(steps))
    connections.close_all()

    port = free_port()
    base = f"http://127.0.0.1:{port}"
    query_cache = args.query_cache or not args.capacity
    server = server_start(port, args.workers, args.threads, query_cache=query_cache)
    cpu_pids = {"server": server.pid, "database": postmaster_pid()}
    try:
        # Warm-up: every worker thread loads the embedder and opens its database connection.
        warm = Recorder()
        warm_stop = threading.Event()
        warmers = [
            threading.Thread(target=client_loop, args=(base, members[i], questions, warm_stop, warm, i))
            for i in range(min(len(members), args.workers * args.threads))
        ]
        for t in warmers:
            t.start()
        time.sleep(15)
        warm_stop.set()
        for t in warmers:
            t.join()
        if args.capacity:
            runs = {
                endpoint: [
                    load_run(
                        base, members, questions, clients=n, seconds=args.seconds, only=endpoint, cpu_pids=cpu_pids
                    )
                    for n in steps
                ]
                for endpoint in endpoints
            }
        else:
            mixed = load_run(
                base,
                members,
                questions,
                clients=args.clients,
                seconds=args.seconds,
                editor=editor,
                cpu_pids=cpu_pids,
            )
    finally:
        server_stop(server)

    header = {
        "server": f"gunicorn gthread (config/gunicorn_conf.py), {args.workers} workers x {args.threads} threads, "
        "127.0.0.1",
        "cpus": os.cpu_count(),
        "settings": {
            name: os.environ.get(name, default)
            for name, default in (
                ("KB_DB_CONN_MAX_AGE", "60"),
                ("KB_EMBED_THREADS", "1"),
                ("KB_CONCURRENT_RETRIEVERS", "false"),
            )
        }
        | {"KB_QUERY_EMBED_CACHE": "on" if query_cache else "0 (every request embeds its question)"},
        "tenant": {"slug": TENANT, **facts},
        "llm": "none (extractive answers)",
        "warm_up_errors": warm.error_count,
    }
    if args.capacity:
        output = {
            **header,
            "steps_seconds": args.seconds,
            "capacity": {
                endpoint: {
                    "saturation_rps": max(r["throughput_rps"] for r in results),
                    "cpu_bound_rps": max((r.get("cpu_bound_rps") or 0) for r in results),
                    **{
                        f"at_{r['clients']}_clients": {
                            "rps": r["throughput_rps"],
                            **{k: v for k, v in r["endpoints"].get(endpoint, {}).items() if k != "count"},
                            "answered": r["endpoints"].get(endpoint, {}).get("count", 0),
                            "errors": r["errors"],
                            "cpu_ms_per_request": r.get("cpu_ms_per_request"),
                            "cpu_bound_rps": r.get("cpu_bound_rps"),
                            "load_average_1min": r["load_average_1min"],
                        }
                        for r in results
                    },
                    "first_errors": [e for r in results for e in r["first_errors"]][:5],
                }
                for endpoint, results in runs.items()
            },
        }
    else:
        output = {**header, **mixed}
    text = json.dumps(output, indent=2)
    print(text)
    results = ROOT / "benchmarks" / "results"
    results.mkdir(exist_ok=True)
    (results / args.output).write_text(text + "\n")


if __name__ == "__main__":
    main()
