"""Ingestion through the real Celery + Redis path (not eager): broker, worker, committed rows."""

import time

import pytest
import redis
from celery.contrib.testing.worker import start_worker

from config.celery import app
from knowledge.models import Chunk, ChunkEnrichment, Document, IngestionJob, MinHashSignature
from knowledge.services import upload_ingest
from tests.conftest import redis_url

BROKER = redis_url(15)


@pytest.fixture
def redis_worker():
    """A Celery worker thread consuming from the real local Redis (this module's own database)."""
    client = redis.Redis.from_url(BROKER)
    try:
        client.flushdb()  # the database is this module's own: drop messages a failed run left
    except redis.ConnectionError as exc:
        pytest.fail(f"Redis is not running on 127.0.0.1:6379 ({exc}); start it as DEVELOPERS.md says.")
    previous = {key: app.conf[key] for key in ("broker_url", "task_always_eager", "result_backend")}
    app.conf.update(broker_url=BROKER, task_always_eager=False, result_backend=None)
    _forget_connections()
    try:
        with start_worker(app, pool="solo", perform_ping_check=False, shutdown_timeout=30):
            yield
    finally:
        app.conf.update(previous)
        _forget_connections()


def _wait(seconds: float, done) -> bool:
    """Poll ``done()`` every 0.2 s until it is true or ``seconds`` pass; its last value."""
    deadline = time.monotonic() + seconds
    while not done():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.2)
    return True


def _forget_connections() -> None:
    """Drop the app's cached connection and producer pools, which keep the broker URL of first use."""
    app._pool = None
    app.amqp._producer_pool = None


@pytest.mark.django_db(transaction=True)
def test_an_upload_is_ingested_by_a_worker_through_redis(tenant, redis_worker, settings, tmp_path):
    settings.KB_DATA_DIR = tmp_path
    job = upload_ingest(
        tenant=tenant,
        source_name="uploads",
        file_name="policy.md",
        data=b"# Travel policy\n\nBook trains for trips under four hours.",
        options={},
    )
    assert job.status == IngestionJob.Status.PENDING  # queued, not run in-process
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        job.refresh_from_db()
        if job.status in (IngestionJob.Status.DONE, IngestionJob.Status.FAILED):
            break
        time.sleep(0.2)
    assert job.status == IngestionJob.Status.DONE, job.error
    assert Document.objects.for_tenant(tenant).get().external_id == "policy.md"


@pytest.mark.django_db(transaction=True)
def test_the_tasks_an_ingestion_queues_by_name_reach_the_worker_through_redis(tenant, redis_worker, settings, tmp_path):
    # Services queue the follow-up tasks by registered name (core.queue); with a broker they travel
    # through Redis to the worker like the job itself, instead of running in-process.
    settings.KB_DATA_DIR = tmp_path
    settings.KB_ENRICHMENT = True
    settings.KB_ENRICHMENT_QUESTIONS = 0  # keyphrases only: no LLM
    settings.KB_NEAR_DUPLICATES = True
    job = upload_ingest(
        tenant=tenant,
        source_name="uploads",
        file_name="expenses.md",
        data=b"# Expenses\n\nClaim hotel costs within thirty days. Receipts are scanned and attached to the claim.",
        options={},
    )
    assert job.status == IngestionJob.Status.PENDING
    body = Chunk.objects.for_tenant(tenant).filter(kind="body")
    assert _wait(60, lambda: body.exists() and ChunkEnrichment.objects.filter(chunk__in=body).count() == body.count())
    assert _wait(60, lambda: MinHashSignature.objects.for_tenant(tenant).exists())  # the near-duplicate search
    job.refresh_from_db()
    assert job.status == IngestionJob.Status.DONE, job.error
