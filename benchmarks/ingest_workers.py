"""Ingestion throughput of the production layout with one and with two Celery workers, and a worker killed mid-run.

Usage: python benchmarks/ingest_workers.py [--files 8] [--dataset hotpotqa] [--no-kill]

Starts ``scripts/production_layout.sh`` (PostgreSQL as a separate server through ``DATABASE_URL``,
Redis as the broker at ``REDIS_URL``, gunicorn, Celery workers and beat) with a 10 s job lease, so
that beat re-queues a dead worker's job within about 20 s. The dataset's documents (HotpotQA dev50
by default: ``../shared/datasets/hotpotqa``) are written as ``--files`` JSONL files and uploaded
through ``POST /api/v1/documents/`` to a fresh tenant, and the clock runs from the first upload
until every job is ``done``:

1. with one worker process (it embeds with every core);
2. with two worker processes (each embeds with half the cores);
3. unless ``--no-kill``: with two workers, one is killed (SIGKILL, its main and pool process) while
   it runs a job; the other worker, after beat re-queues the job once its lease ran out, finishes.
   Checked: every job done, every document stored once with all its chunks, the killed job
   started twice.

The post-ingestion tasks (near-duplicates, table upkeep) run on the same workers, as in
production. Prints one JSON object (also ``benchmarks/results/ingest_workers.json``): per run
the documents, chunks, seconds, chunks/s and the machine's 1-minute load average at its start
and end; the layout is stopped at the end.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import time
import uuid
from pathlib import Path

from _setup import ROOT, django_setup

DATASETS = Path(os.environ.get("KB_BENCH_DATASETS", ROOT.parent / "shared" / "datasets"))
LEASE_S = 10


def layout(*args: str) -> str:
    """Run ``scripts/production_layout.sh`` with ``args``; its stdout. Raises ``CalledProcessError``."""
    return subprocess.run(
        ["bash", str(ROOT / "scripts" / "production_layout.sh"), *args],
        cwd=ROOT,
        check=True,
        stdout=subprocess.PIPE,
        text=True,
    ).stdout


def layout_dir() -> Path:
    data = Path(os.environ.get("KB_DATA_DIR", ROOT / ".kb-data"))
    return Path(os.environ.get("KB_LAYOUT_DIR", data / "layout"))


def files_make(dataset: str, count: int) -> tuple[list[tuple[str, bytes]], int]:
    """The dataset's documents as ``count`` JSONL files ``(name, bytes)``, and the document count."""
    from quality.importers import dataset_load

    paths = sorted((DATASETS / dataset).glob("*.json"))
    documents = dataset_load(name=dataset, paths=paths).documents
    files = []
    for n in range(count):
        part = documents[n::count]
        lines = [json.dumps({"id": d.external_id, "title": d.title, "text": d.text}) for d in part]
        files.append((f"part-{n:02d}.jsonl", ("\n".join(lines) + "\n").encode()))
    return files, len(documents)


def tenant_with_token(prefix: str):
    """A fresh tenant and an editor's API token for it."""
    from rest_framework.authtoken.models import Token

    from core.models import Membership
    from core.services import membership_create, tenant_create

    tenant = tenant_create(slug=f"{prefix}-{uuid.uuid4().hex[:8]}")
    user = membership_create(
        tenant=tenant, username=f"{tenant.slug}-editor", password=os.urandom(16).hex(), role=Membership.Role.EDITOR
    )
    return tenant, Token.objects.get_or_create(user=user)[0].key


def node_pids() -> dict[str, list[int]]:
    """``{node: [main pid, pool pids...]}`` of the running Celery workers (from their pid files)."""
    import psutil

    nodes = {}
    for pidfile in sorted(layout_dir().glob("celery*.pid")):
        try:
            main = psutil.Process(int(pidfile.read_text()))
            nodes[pidfile.stem] = [main.pid] + [c.pid for c in main.children(recursive=True)]
        except (psutil.NoSuchProcess, ValueError):
            continue
    return nodes


def ingest_run(base: str, files: list[tuple[str, bytes]], *, kill: bool = False) -> dict:
    """Upload ``files`` to a fresh tenant and wait until every job ended; with ``kill``, SIGKILL the
    worker node running the first job that has embedded something. Returns the run's figures."""
    import requests
    from django.db import connections

    from knowledge.models import Chunk, Document, DocumentVersion, IngestionJob

    tenant, token = tenant_with_token("ingest-workers")
    session = requests.Session()
    session.headers["Authorization"] = f"Token {token}"
    load_before = os.getloadavg()[0]
    started = time.perf_counter()
    job_ids = []
    for name, data in files:
        response = session.post(
            f"{base}/api/v1/documents/", files={"file": (name, data, "application/jsonl")}, data={"source": "bench"}
        )
        if response.status_code != 202:
            raise SystemExit(f"Upload of {name} answered {response.status_code}: {response.text[:300]}")
        job_ids.append(response.json()["id"])
    killed: dict | None = None
    deadline = time.monotonic() + 900
    while time.monotonic() < deadline:
        jobs = list(IngestionJob.objects.filter(pk__in=job_ids))
        if kill and killed is None:
            running = [j for j in jobs if j.status == "running" and j.progress.get("chunks_embedded", 0) > 0]
            if running:
                pid = int(running[0].worker_id.rsplit("/", 1)[1])
                node, pids = next((n, p) for n, p in node_pids().items() if pid in p)
                for each in pids:
                    os.kill(each, signal.SIGKILL)
                killed = {"node": node, "job": running[0].pk, "at_s": round(time.perf_counter() - started, 1)}
        if all(j.status in ("done", "failed") for j in jobs):
            break
        time.sleep(0.2)
    else:
        raise SystemExit(f"The jobs did not end within 900 s; see {layout_dir()}/*.log")
    seconds = time.perf_counter() - started
    jobs = {j.pk: j for j in IngestionJob.objects.filter(pk__in=job_ids)}
    chunks = Chunk.objects.filter(tenant=tenant).count()
    versions = DocumentVersion.objects.filter(document__tenant=tenant)
    figures = {
        "jobs": len(jobs),
        "jobs_done": sum(j.status == "done" for j in jobs.values()),
        "documents": Document.objects.filter(tenant=tenant).count(),
        "chunks": chunks,
        "seconds": round(seconds, 1),
        "chunks_per_s": round(chunks / seconds, 1),
        "load_average_1min": {"start": round(load_before, 1), "end": round(os.getloadavg()[0], 1)},
    }
    if kill:
        taken_over = jobs[killed["job"]] if killed else None
        incomplete = sum(v.chunks.count() == 0 for v in versions.filter(is_current=True))
        figures["killed"] = {
            **(killed or {"node": None}),
            "job_attempts": taken_over.attempts if taken_over else None,
            "job_finished_by": taken_over.worker_id if taken_over else None,
            "current_versions": versions.filter(is_current=True).count(),
            "versions_without_chunks": incomplete,
            "failed_jobs": [j.error for j in jobs.values() if j.status != "done"],
        }
    connections.close_all()
    return figures


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--files", type=int, default=8, help="JSONL files (one job each)")
    parser.add_argument("--dataset", default="hotpotqa", choices=["hotpotqa", "bioasq"])
    parser.add_argument("--no-kill", action="store_true", help="skip the run with a worker killed")
    args = parser.parse_args()
    os.environ["KB_JOB_LEASE_S"] = str(LEASE_S)
    os.environ["KB_CELERY_WORKERS"] = "1"
    bind = os.environ.setdefault("KB_BIND", "127.0.0.1:8017")
    base = f"http://{bind}"
    try:
        layout("up")
        for line in layout("env").splitlines():  # DATABASE_URL, CELERY_BROKER_URL, KB_DATA_DIR
            for pair in line.removeprefix("export ").split(" "):
                key, _, value = pair.partition("=")
                os.environ[key] = value.strip("'")
        django_setup()
        from django.conf import settings

        files, documents = files_make(args.dataset, args.files)
        runs = {"one_worker": ingest_run(base, files)}
        layout("workers", "2")
        runs["two_workers"] = ingest_run(base, files)
        if not args.no_kill:
            runs["two_workers_one_killed"] = ingest_run(base, files, kill=True)
        database = settings.DATABASES["default"]
    finally:
        layout("down")
    output = {
        "layout": "scripts/production_layout.sh: gunicorn (config/gunicorn_conf.py), Celery prefork workers "
        "(-c 1 each) and beat on Redis, PostgreSQL as a separate server over TCP",
        "database": f"{database['HOST']}:{database['PORT']} (DATABASE_URL)",
        "broker": os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0"),
        "cpus": os.cpu_count(),
        "dataset": args.dataset,
        "documents": documents,
        "files": args.files,
        "job_lease_s": LEASE_S,
        "runs": runs,
        "two_vs_one": round(runs["two_workers"]["chunks_per_s"] / runs["one_worker"]["chunks_per_s"], 2),
    }
    text = json.dumps(output, indent=2)
    print(text)
    (ROOT / "benchmarks" / "results" / "ingest_workers.json").write_text(text + "\n")


if __name__ == "__main__":
    main()
