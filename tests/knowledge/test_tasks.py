"""Ingestion through the real Celery + Redis path (not eager): broker, worker, committed rows."""

import time

import pytest
import redis
from celery.contrib.testing.worker import start_worker

from config.celery import app
from knowledge.models import Document, IngestionJob
from knowledge.services import upload_ingest

BROKER = "redis://127.0.0.1:6379/15"


@pytest.fixture
def redis_worker():
    """A Celery worker thread consuming from the real local Redis (database 15)."""
    client = redis.Redis.from_url(BROKER)
    try:
        client.flushdb()  # database 15 is the tests' own: drop messages a failed run left
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
