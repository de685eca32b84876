"""Ingestion jobs under leases: a real Celery worker killed mid-ingest, takeover, recovery, retries."""

import io
import json
import os
import random
import signal
import subprocess
import sys
import time
import uuid
from datetime import timedelta
from pathlib import Path
from urllib.parse import quote

import pytest
import redis
from django.core.management import call_command
from django.db import connection
from django.utils import timezone

from config.celery import app
from core.errors import UpstreamError
from knowledge.ingestion.readers import read_bytes
from knowledge.ingestion.splitters import get_splitter
from knowledge.models import Document, DocumentVersion, IngestionJob
from knowledge.services import IngestionJobBusy, ingestion_job_run, ingestion_jobs_recover, upload_ingest
from tests.conftest import free_port, redis_url

ROOT = Path(__file__).resolve().parents[2]
BROKER = redis_url(14)  # database 14: the worker-kill test's own (test_tasks uses 15)
LEASE_S = 5
TIME_LIMIT_S = 10
VISIBILITY_S = TIME_LIMIT_S + LEASE_S  # what config/settings.py derives from the two


def _bulk_jsonl(documents: int, seed: int = 7) -> bytes:
    """``documents`` JSONL lines of distinct prose, each several chunks long."""
    rng = random.Random(seed)
    words = (
        "river mountain ledger invoice cobalt harbour lantern orchard quarry saddle timber velvet "
        "anchor beacon canyon dynamo falcon glacier hammock island jasmine kettle lagoon meadow "
        "nectar oyster pepper quiver rocket spruce tundra umbrella violet walrus yonder zephyr"
    ).split()
    lines = []
    for n in range(documents):
        sentences = [
            " ".join(rng.choice(words) for _ in range(rng.randint(9, 16))).capitalize() + f" (part {n}-{i})."
            for i in range(30)
        ]
        lines.append(json.dumps({"id": f"bulk/{n:03d}", "title": f"Bulk document {n}", "text": " ".join(sentences)}))
    return ("\n".join(lines) + "\n").encode()


def _database_url() -> str:
    """The test database as a DATABASE_URL, for the worker processes."""
    db = connection.settings_dict
    host = quote(db["HOST"], safe="")
    port = f":{db['PORT']}" if db["PORT"] else ""
    return f"postgresql://{db['USER']}:{quote(db['PASSWORD'] or '')}@{host}{port}/{db['NAME']}"


@pytest.fixture
def job_queue():
    """A queue of its own on the real local Redis, routed to by this process's ingestion tasks."""
    client = redis.Redis.from_url(BROKER)
    try:
        client.ping()
    except redis.ConnectionError as exc:
        pytest.fail(f"Redis is not running on 127.0.0.1:6379 ({exc}).")
    queue = f"kb-test-jobs-{uuid.uuid4().hex[:12]}"
    previous = {key: app.conf[key] for key in ("broker_url", "task_always_eager", "result_backend", "task_routes")}
    app.conf.update(
        broker_url=BROKER,
        task_always_eager=False,
        result_backend=None,
        task_routes={"knowledge.tasks.ingestion_job_task": {"queue": queue}},
    )
    _forget_connections()
    try:
        yield queue
    finally:
        app.conf.update(previous)
        _forget_connections()
        client.delete(queue)


def _forget_connections() -> None:
    """Drop the app's cached connections, producers and router, which keep the settings of first use."""
    app._pool = None
    app.amqp._producer_pool = None
    app.amqp._rtable = None
    app.amqp.router = app.amqp.Router()


class Worker:
    """A real ``celery worker`` process on ``queue`` (``pool`` solo or prefork with one child), against
    the test database, with a 5 s job lease and a 10 s time limit unless ``env`` says otherwise."""

    def __init__(self, queue: str, name: str, log: Path, *, pool: str = "solo", env: dict | None = None):
        env = {
            **os.environ,
            "DATABASE_URL": _database_url(),
            "CELERY_BROKER_URL": BROKER,
            "KB_JOB_LEASE_S": str(LEASE_S),
            "KB_TASK_TIME_LIMIT": str(TIME_LIMIT_S),
            "KB_JOB_RETRY_BACKOFF_MAX_S": "5",
            "KB_EMBED_BATCH_SIZE": "8",  # progress after every 32 chunks
            "HF_HUB_OFFLINE": "1",
            "TRANSFORMERS_OFFLINE": "1",
            "TOKENIZERS_PARALLELISM": "false",
            "PYTHONUNBUFFERED": "1",
            **(env or {}),
        }
        self.log = log
        command = [sys.executable, "-m", "celery", "-A", "config", "worker", "--pool", pool, "-c", "1", "-Q", queue]
        command += ["-n", f"{name}@%h", "--without-gossip", "--without-mingle", "--without-heartbeat", "-l", "info"]
        with log.open("ab") as out:
            self.process = subprocess.Popen(
                command, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
            )

    def kill(self) -> None:
        os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait(30)

    def stop(self) -> None:
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(30)
            except subprocess.TimeoutExpired:
                self.kill()


def _versions_state(tenant_id: int) -> list[tuple[str, bool, int]]:
    """(external id, is current, chunk count) of every version of the tenant, in one snapshot."""
    with connection.cursor() as cursor:
        cursor.execute(
            """
            SELECT d.external_id, v.is_current, count(c.id)
            FROM knowledge_documentversion v
            JOIN knowledge_document d ON d.id = v.document_id
            LEFT JOIN knowledge_chunk c ON c.version_id = v.id
            WHERE d.tenant_id = %s
            GROUP BY v.id, d.external_id, v.is_current
            """,
            [tenant_id],
        )
        return cursor.fetchall()


@pytest.mark.django_db(transaction=True)
def test_a_job_whose_worker_is_killed_mid_ingest_is_completed_by_the_next_worker(tenant, job_queue, settings, tmp_path):
    settings.KB_DATA_DIR = tmp_path
    data = _bulk_jsonl(24)
    documents = read_bytes(data, name="bulk.jsonl", external_id="bulk.jsonl")
    expected = {d.external_id: len(get_splitter().split(d)) for d in documents}
    partial_versions_seen = []

    def check_and_wait(seconds: float, until=lambda: False) -> bool:
        """Watch the versions for ``seconds`` (or until ``until()``): a current version is always complete."""
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            for external_id, current, chunks in _versions_state(tenant.pk):
                if chunks != (expected[external_id] if current else 0):
                    partial_versions_seen.append((external_id, current, chunks))
            if until():
                return True
            time.sleep(0.05)
        return False

    def job() -> IngestionJob:
        return IngestionJob.objects.get(pk=job_id)

    job_id = upload_ingest(tenant=tenant, source_name="bulk", file_name="bulk.jsonl", data=data, options={}).pk
    assert redis.Redis.from_url(BROKER).llen(job_queue) == 1
    first = Worker(job_queue, "first", tmp_path / "worker.log")
    second = None
    try:
        midway = check_and_wait(
            300,
            until=lambda: job().status == "running" and job().progress.get("chunks_embedded", 0) >= 32,
        )
        assert midway, (tmp_path / "worker.log").read_text()[-3000:]
        first.kill()
        killed_at = timezone.now()
        assert job().status == "running"
        assert not Document.objects.for_tenant(tenant).exists()  # all or nothing: the killed run left none

        # Redis gives the unacknowledged message back once the visibility timeout has passed.
        redelivery = job().started_at + timedelta(seconds=VISIBILITY_S + 1)
        check_and_wait(max((redelivery - timezone.now()).total_seconds(), 0))
        second = Worker(job_queue, "second", tmp_path / "worker.log")
        finished = check_and_wait(300, until=lambda: job().status in ("done", "failed"))
        assert finished, (tmp_path / "worker.log").read_text()[-3000:]
    finally:
        first.stop()
        if second is not None:
            second.stop()

    final = job()
    assert final.status == "done", final.error
    assert final.attempts == 2
    assert final.finished_at > killed_at
    assert final.result["created"] == 24 and final.result["chunks"] == sum(expected.values())
    assert partial_versions_seen == []
    versions = DocumentVersion.objects.for_tenant(tenant)
    assert versions.count() == 24 and versions.filter(is_current=True).count() == 24
    for version in versions.select_related("document"):
        assert version.chunks.count() == expected[version.document.external_id]


@pytest.mark.django_db(transaction=True)
def test_a_pool_process_killed_mid_ingest_has_its_job_taken_over_once_its_lease_runs_out(
    tenant, job_queue, settings, tmp_path
):
    settings.KB_DATA_DIR = tmp_path
    data = _bulk_jsonl(48)  # long enough to still be embedding when killed, on a quiet machine too
    expected = sum(len(get_splitter().split(d)) for d in read_bytes(data, name="bulk.jsonl", external_id="bulk.jsonl"))
    job_id = upload_ingest(tenant=tenant, source_name="bulk", file_name="bulk.jsonl", data=data, options={}).pk

    def job() -> IngestionJob:
        return IngestionJob.objects.get(pk=job_id)

    def wait(seconds: float, until) -> bool:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            if until():
                return True
            time.sleep(0.1)
        return False

    # A prefork worker: killing its pool process (as the kernel's OOM killer would) makes the main
    # process put the message back at once; the job's lease is still live then.
    worker = Worker(job_queue, "pool", tmp_path / "worker.log", pool="prefork", env={"KB_TASK_TIME_LIMIT": "600"})
    try:
        assert wait(300, lambda: job().status == "running" and job().progress.get("chunks_embedded", 0) >= 32), (
            tmp_path / "worker.log"
        ).read_text()[-3000:]
        killed = job().worker_id
        os.kill(int(killed.rsplit("/", 1)[1]), signal.SIGKILL)
        assert wait(300, lambda: job().status in ("done", "failed")), (tmp_path / "worker.log").read_text()[-3000:]
    finally:
        worker.stop()
    final = job()
    assert final.status == "done", final.error
    assert final.attempts == 2 and final.worker_id != killed
    assert final.result["created"] == 48 and final.result["chunks"] == expected
    assert DocumentVersion.objects.for_tenant(tenant).count() == 48
    log = (tmp_path / "worker.log").read_text()
    # Requeued at once (it then waits for the lease with "Retry in ..." if it is still live: timing).
    assert "WorkerLostError" in log


def _queued_job(
    tenant, captured, data: bytes = b"# Travel policy\n\nBook trains for trips under four hours."
) -> IngestionJob:
    """An uploaded job whose task was not run (its on-commit callback is only captured)."""
    with captured(execute=False):
        return upload_ingest(tenant=tenant, source_name="uploads", file_name="policy.md", data=data, options={})


def test_a_failure_while_storing_the_third_line_stores_nothing_and_the_job_says_so(
    tenant, settings, tmp_path, django_capture_on_commit_callbacks
):
    settings.KB_DATA_DIR = tmp_path
    lines = [
        {"id": f"line-{n}", "title": f"Line {n}", "text": f"Line {n} talks about topic number {n}."} for n in (1, 2, 3)
    ]
    data = "\n".join(json.dumps(line) for line in lines).encode()
    with connection.cursor() as cursor:  # the database refuses line 3 (a real failure, while storing it)
        cursor.execute(
            "ALTER TABLE knowledge_document ADD CONSTRAINT test_refuse_line_3 CHECK (external_id <> 'line-3')"
        )
    with django_capture_on_commit_callbacks(execute=True):
        job = upload_ingest(tenant=tenant, source_name="uploads", file_name="lines.jsonl", data=data, options={})
    job.refresh_from_db()
    assert job.status == IngestionJob.Status.FAILED
    assert job.error == (
        "line-3: the document could not be stored (it conflicts with stored data). Nothing from this file was stored."
    )
    assert job.result["created"] == 0 and job.result["documents"] == []
    assert not Document.objects.for_tenant(tenant).exists()


def test_a_job_whose_lease_ran_out_is_taken_over_and_completed(
    tenant, settings, tmp_path, django_capture_on_commit_callbacks
):
    settings.KB_DATA_DIR = tmp_path
    job = _queued_job(tenant, django_capture_on_commit_callbacks)
    IngestionJob.objects.filter(pk=job.pk).update(
        status="running", worker_id="dead-host/1", attempts=1, lease_expires_at=timezone.now() - timedelta(seconds=1)
    )
    job = ingestion_job_run(job_id=job.pk, worker_id="live-host/2")
    assert (job.status, job.attempts, job.worker_id) == ("done", 2, "live-host/2")
    assert job.result["created"] == 1
    assert Document.objects.for_tenant(tenant).get().external_id == "policy.md"


def test_a_job_under_a_live_lease_is_not_run_a_second_time(
    tenant, settings, tmp_path, django_capture_on_commit_callbacks
):
    settings.KB_DATA_DIR = tmp_path
    job = _queued_job(tenant, django_capture_on_commit_callbacks)
    IngestionJob.objects.filter(pk=job.pk).update(
        status="running", worker_id="busy-host/1", attempts=1, lease_expires_at=timezone.now() + timedelta(seconds=30)
    )
    with pytest.raises(IngestionJobBusy) as busy:
        ingestion_job_run(job_id=job.pk, worker_id="other-host/2")
    assert 29 <= busy.value.retry_in <= 31
    job.refresh_from_db()
    assert (job.status, job.worker_id, job.attempts) == ("running", "busy-host/1", 1)
    assert not Document.objects.for_tenant(tenant).exists()


def test_the_recovery_task_requeues_only_jobs_whose_worker_died(
    tenant, settings, tmp_path, django_capture_on_commit_callbacks
):
    settings.KB_DATA_DIR = tmp_path
    dead = _queued_job(tenant, django_capture_on_commit_callbacks)
    alive = _queued_job(tenant, django_capture_on_commit_callbacks, data=b"# Leave\n\nAsk for leave a week ahead.")
    now = timezone.now()
    IngestionJob.objects.filter(pk=dead.pk).update(
        status="running", attempts=1, lease_expires_at=now - timedelta(seconds=5)
    )
    IngestionJob.objects.filter(pk=alive.pk).update(
        status="running", attempts=1, lease_expires_at=now + timedelta(seconds=60)
    )
    with django_capture_on_commit_callbacks(execute=True):  # the re-queued task runs (eagerly: no broker)
        from knowledge.tasks import ingestion_jobs_recover_task

        assert ingestion_jobs_recover_task.delay().get() == [dead.pk]
    dead.refresh_from_db()
    alive.refresh_from_db()
    assert (dead.status, dead.attempts) == ("done", 2)
    assert alive.status == "running"
    assert ingestion_jobs_recover() == []


def test_a_job_whose_worker_keeps_dying_is_failed_after_its_last_attempt(
    tenant, settings, tmp_path, django_capture_on_commit_callbacks
):
    settings.KB_DATA_DIR = tmp_path
    job = _queued_job(tenant, django_capture_on_commit_callbacks)
    IngestionJob.objects.filter(pk=job.pk).update(
        status="running", attempts=settings.KB_JOB_MAX_ATTEMPTS, lease_expires_at=timezone.now() - timedelta(seconds=1)
    )
    job = ingestion_job_run(job_id=job.pk)
    assert job.status == "failed"
    assert job.error.startswith(f"The job was started {settings.KB_JOB_MAX_ATTEMPTS} times and never finished")
    assert not Document.objects.for_tenant(tenant).exists()


def test_an_embedding_endpoint_that_is_down_is_retried_then_the_job_fails_saying_so(
    tenant, settings, tmp_path, django_capture_on_commit_callbacks
):
    from knowledge.tasks import ingestion_job_task

    settings.KB_DATA_DIR = tmp_path
    settings.OPENAI_BASE_URL = f"http://127.0.0.1:{free_port()}/v1"
    tenant.embedder = f"openai:down-{uuid.uuid4().hex[:8]}"
    tenant.save()
    job = _queued_job(tenant, django_capture_on_commit_callbacks)
    with pytest.raises(UpstreamError):
        ingestion_job_run(job_id=job.pk)
    job.refresh_from_db()  # back in the queue for a retry, nothing stored
    assert job.status == "pending" and job.error.startswith("Temporary failure (Embedding endpoint failed")
    assert not Document.objects.for_tenant(tenant).exists()

    # The task retries it with backoff; once its retries are spent, the job fails and says so.
    outcome = ingestion_job_task.apply(args=[job.pk], retries=settings.KB_JOB_MAX_RETRIES, throw=False)
    assert outcome.failed()
    job.refresh_from_db()
    assert job.status == "failed"
    assert job.error.startswith(f"The job gave up after {settings.KB_JOB_MAX_RETRIES} retries.")
    assert ingestion_job_task.retry_backoff and UpstreamError in ingestion_job_task.autoretry_for


def test_ingest_async_queues_a_job_per_file_and_prints_their_ids(
    tenant, job_queue, tmp_path, django_capture_on_commit_callbacks
):
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "guide.md").write_text("# Guide\n\nStep one is to read the manual carefully.")
    (tmp_path / "docs" / "notes.txt").write_text("Plain notes about the quarterly planning meeting.")
    out = io.StringIO()
    with django_capture_on_commit_callbacks(execute=True):
        call_command(
            "ingest",
            "--tenant",
            tenant.slug,
            "--source",
            "handbook",
            str(tmp_path / "docs"),
            "--async",
            "--json",
            stdout=out,
        )
    ids = json.loads(out.getvalue())["jobs"]
    jobs = IngestionJob.objects.for_tenant(tenant).filter(pk__in=ids).order_by("pk")
    assert [(j.file_name, j.status) for j in jobs] == [("guide.md", "pending"), ("notes.txt", "pending")]
    assert redis.Redis.from_url(BROKER).llen(job_queue) == 2
    assert not Document.objects.for_tenant(tenant).exists()  # nothing ingested in-process
    job = ingestion_job_run(job_id=ids[0])  # what a worker does with the first
    assert job.status == "done"
    assert Document.objects.for_tenant(tenant).get().external_id == "guide"


def test_ingest_async_without_a_broker_says_so_and_ingests_in_process(tenant, tmp_path):
    (tmp_path / "guide.md").write_text("# Guide\n\nStep one is to read the manual carefully.")
    out, err = io.StringIO(), io.StringIO()
    call_command(
        "ingest", "--tenant", tenant.slug, "--source", "handbook", str(tmp_path), "--async", stdout=out, stderr=err
    )
    assert "no broker is configured" in err.getvalue()
    assert "1 created" in out.getvalue()
    assert not IngestionJob.objects.for_tenant(tenant).exists()


def test_an_upload_whose_broker_is_down_is_failed_saying_so_not_left_pending(
    tenant, settings, tmp_path, django_capture_on_commit_callbacks
):
    settings.KB_DATA_DIR = tmp_path
    previous = {key: app.conf[key] for key in ("broker_url", "task_always_eager")}
    app.conf.update(broker_url=f"redis://127.0.0.1:{free_port()}/0", task_always_eager=False)
    _forget_connections()
    try:
        with django_capture_on_commit_callbacks(execute=True):
            job = upload_ingest(
                tenant=tenant, source_name="uploads", file_name="a.md", data=b"# A\n\nText.", options={}
            )
    finally:
        app.conf.update(previous)
        _forget_connections()
    job.refresh_from_db()
    assert job.status == "failed"
    assert (
        job.error == "The job could not be queued or run (is the broker running?). Nothing from this file was stored."
    )
