"""Load test through the real HTTP server: 50 clients asking and searching, plus uploads, for 60 s.

Usage: python benchmarks/load.py [--seconds 60] [--clients 50] [--workers 2] [--threads 8]

Starts gunicorn (``config.wsgi``, gthread workers) on a free port of 127.0.0.1 against this
process's ``KB_DATA_DIR`` (its embedded PostgreSQL), with no LLM (answers are extractive), no
broker (an upload's ingestion job runs in the uploading request's worker, as in the demo) and
``KB_API_RATE`` raised so the per-user throttle does not trip, and ``OMP_NUM_THREADS=1`` (torch
uses one thread per embedder call, as the request threads already fill the cores). The tenant ``load-bench`` holds the
HotpotQA distractor dev50 corpus (``../shared/datasets/hotpotqa``, about 500 Wikipedia
paragraphs; ingested once, reused on later runs) and one API token per client.

Then ``--clients`` threads, each with its own token and keep-alive connection, alternate
``POST /api/v1/ask/`` and ``POST /api/v1/search/`` with the dataset's questions as fast as the
server answers, while one more thread uploads a small Markdown document every second
(``POST /api/v1/documents/``) and polls its job (``GET /api/v1/jobs/<id>/``) until it is done.

Prints one JSON object (also written to ``benchmarks/results/load.json``): requests per second,
p50/p95/p99 latency in ms per endpoint, the error count (any non-2xx answer or failed request;
the first ten are listed) and the uploads whose jobs finished ``done``. Latency includes the
client's queueing on the server: 50 clients share ``workers x threads`` server threads on the
machine's cores, so it measures saturation, not an idle request. The machine's 1-minute load
average before and at the end of the window is reported, since other work on it slows every figure.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import socket
import subprocess
import sys
import threading
import time
from collections import defaultdict
from pathlib import Path

from _setup import ROOT, django_setup

TENANT = "load-bench"
HOTPOTQA = Path(os.environ.get("KB_BENCH_DATASETS", ROOT.parent / "shared" / "datasets")) / "hotpotqa"


def percentile(values: list[float], q: float) -> float:
    """The ``q``-th percentile (nearest rank) of ``values``; 0.0 for no values."""
    if not values:
        return 0.0
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, round(q / 100 * (len(ordered) - 1))))
    return ordered[index]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


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


def server_start(port: int, workers: int, threads: int) -> subprocess.Popen:
    """gunicorn serving ``config.wsgi`` on ``port``; returns once it answers or raises."""
    env = {
        **os.environ,
        "KB_API_RATE": "1000000/min",
        "KB_LLM_MODEL": "",
        "CELERY_BROKER_URL": "",
        "REDIS_URL": "",
        "DEBUG": "false",
        # 16 request threads share the cores: one intra-op thread per embedder call, not one per core each.
        "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1"),
    }
    command = [
        sys.executable,
        "-m",
        "gunicorn",
        "config.wsgi:application",
        f"--bind=127.0.0.1:{port}",
        f"--workers={workers}",
        f"--threads={threads}",
        "--worker-class=gthread",
        "--timeout=300",
        "--keep-alive=30",
        "--log-level=warning",
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


def client_loop(base: str, token: str, questions: list[str], stop: threading.Event, rec: Recorder, seed: int):
    import requests

    rng = random.Random(seed)
    session = requests.Session()
    session.headers["Authorization"] = f"Token {token}"
    turn = seed % 2
    while not stop.is_set():
        question = rng.choice(questions)
        endpoint, body = ("ask", {"question": question}) if turn % 2 == 0 else ("search", {"query": question, "k": 10})
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


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=60)
    parser.add_argument("--clients", type=int, default=50)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--threads", type=int, default=8)
    args = parser.parse_args()
    django_setup()
    from django.core.management import call_command
    from django.db import connections

    call_command("migrate", verbosity=0)  # a fresh KB_DATA_DIR works too
    members, editor, questions, facts = tenant_prepare(args.clients)
    connections.close_all()

    port = free_port()
    base = f"http://127.0.0.1:{port}"
    server = server_start(port, args.workers, args.threads)
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

        rec = Recorder()
        stop = threading.Event()
        uploads_done: list[float] = []
        threads = [
            threading.Thread(target=client_loop, args=(base, members[i], questions, stop, rec, 1000 + i))
            for i in range(args.clients)
        ]
        threads.append(threading.Thread(target=upload_loop, args=(base, editor, stop, rec, uploads_done)))
        load_before = os.getloadavg()
        started = time.perf_counter()
        for t in threads:
            t.start()
        time.sleep(args.seconds)
        rec.window_end = time.perf_counter()
        stop.set()
        load_after = os.getloadavg()
        for t in threads:
            t.join()
        elapsed = rec.window_end - started
        drain = time.perf_counter() - rec.window_end
    finally:
        server_stop(server)

    requests_ok = sum(len(v) for v in rec.latencies.values())
    output = {
        "server": f"gunicorn gthread, {args.workers} workers x {args.threads} threads, 127.0.0.1",
        "cpus": os.cpu_count(),
        "clients": args.clients,
        "seconds": round(elapsed, 1),
        "drain_s": round(drain, 1),  # waiting for the requests in flight at the end (counted in latencies)
        "load_average_1min": {"before": round(load_before[0], 1), "end": round(load_after[0], 1)},
        "tenant": {"slug": TENANT, **facts},
        "llm": "none (extractive answers)",
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
        "uploads_done": len(uploads_done),
        "upload_to_done_p50_ms": round(percentile(uploads_done, 50), 1),
        "errors": rec.error_count,
        "first_errors": rec.errors,
        "warm_up_errors": warm.error_count,
    }
    text = json.dumps(output, indent=2)
    print(text)
    results = ROOT / "benchmarks" / "results"
    results.mkdir(exist_ok=True)
    (results / "load.json").write_text(text + "\n")


if __name__ == "__main__":
    main()
