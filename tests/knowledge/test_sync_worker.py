"""A sync whose real Celery worker is killed midway is taken over and finished by the next worker."""

import time
from datetime import timedelta

import pytest
import redis
from django.utils import timezone

from knowledge.models import Document, DocumentVersion, SyncRun
from knowledge.services.sources import source_create
from knowledge.services.sync import sync_run_request
from knowledge.services.sync_batches import BATCH_DOCUMENTS
from tests.factories import folder_granted
from tests.knowledge.test_jobs import BROKER, VISIBILITY_S, Worker, _bulk_jsonl, job_queue  # noqa: F401, F811

FILES = BATCH_DOCUMENTS * 2  # two ingestion batches: the worker is killed after the first


@pytest.fixture
def sync_queue(job_queue):  # noqa: F811
    """``job_queue`` (a queue of its own on the real Redis) with the sync task routed to it."""
    from config.celery import app

    app.conf.task_routes = {"knowledge.tasks.source_sync_task": {"queue": job_queue}}
    app.amqp._rtable = None
    app.amqp.router = app.amqp.Router()
    return job_queue


@pytest.mark.django_db(transaction=True)
def test_a_sync_whose_worker_is_killed_midway_is_finished_by_the_next_worker(tenant, sync_queue, settings, tmp_path):
    settings.KB_DATA_DIR = tmp_path / "data"
    settings.KB_DATA_DIR.mkdir()
    folder = folder_granted(tenant, tmp_path / "bulk")
    for n, line in enumerate(_bulk_jsonl(FILES).decode().splitlines()):
        (folder / f"page-{n:03d}.txt").write_text(line[line.index('"text": "') + 9 :][:1500])  # about two chunks
    source = source_create(tenant=tenant, name="bulk", kind="folder", location=str(folder))

    run_id = sync_run_request(source=source).pk
    assert redis.Redis.from_url(BROKER).llen(sync_queue) == 1

    def run() -> SyncRun:
        return SyncRun.objects.get(pk=run_id)

    def wait(seconds: float, until) -> bool:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            if until():
                return True
            time.sleep(0.05)
        return False

    log = tmp_path / "worker.log"
    first = Worker(sync_queue, "first", log)
    second = None
    try:
        midway = wait(300, lambda: Document.objects.filter(tenant=tenant).count() >= BATCH_DOCUMENTS)
        assert midway, log.read_text()[-3000:]
        first.kill()
        killed_at = timezone.now()
        stored = Document.objects.filter(tenant=tenant).count()
        assert run().status == "running" and stored < FILES
        redelivery = run().started_at + timedelta(seconds=VISIBILITY_S + 1)
        time.sleep(max((redelivery - timezone.now()).total_seconds(), 0))
        second = Worker(sync_queue, "second", log)
        assert wait(300, lambda: run().status in ("done", "failed")), log.read_text()[-3000:]
    finally:
        first.stop()
        if second is not None:
            second.stop()

    final = run()
    assert final.status == "done", final.error
    assert final.attempts == 2 and final.finished_at > killed_at
    # What the killed worker stored is found unchanged (not read again); the rest is new.
    assert final.unchanged == stored and final.new == FILES - stored and final.failed == 0
    versions = DocumentVersion.objects.filter(document__tenant=tenant)
    assert versions.count() == FILES and versions.filter(is_current=True).count() == FILES
