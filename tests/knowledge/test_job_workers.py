"""Ingestion jobs shared by two real Celery workers: one is killed mid-ingest, the other finishes everything."""

import time

import pytest
import redis
from django.db import connection

from knowledge.ingestion.readers import read_bytes
from knowledge.ingestion.splitters import get_splitter
from knowledge.models import DocumentVersion, IngestionJob
from knowledge.services import upload_ingest
from tests.knowledge.test_jobs import BROKER, Worker, _bulk_jsonl, job_queue  # noqa: F401, F811

JOBS = 4
DOCUMENTS = 24  # per job: several batches of embedding, so a worker is killed mid-job


def _versions_state(tenant_id: int) -> list[tuple[str, str, bool, int]]:
    """(source name, external id, is current, chunk count) of every version of the tenant, in one snapshot."""
    with connection.cursor() as cursor:
        cursor.execute(
            """
            SELECT s.name, d.external_id, v.is_current, count(c.id)
            FROM knowledge_documentversion v
            JOIN knowledge_document d ON d.id = v.document_id
            JOIN knowledge_source s ON s.id = d.source_id
            LEFT JOIN knowledge_chunk c ON c.version_id = v.id
            WHERE d.tenant_id = %s
            GROUP BY v.id, s.name, d.external_id, v.is_current
            """,
            [tenant_id],
        )
        return cursor.fetchall()


@pytest.mark.django_db(transaction=True)
def test_a_worker_killed_mid_ingest_beside_a_live_one_loses_no_job_and_no_document(
    tenant,
    job_queue,  # noqa: F811
    settings,
    tmp_path,
):
    settings.KB_DATA_DIR = tmp_path
    expected: dict[tuple[str, str], int] = {}  # (source, external id) -> chunks
    job_ids = []
    for n in range(JOBS):
        data = _bulk_jsonl(DOCUMENTS, seed=100 + n).replace(b'"id": "bulk/', f'"id": "job{n}/'.encode())
        for document in read_bytes(data, name="bulk.jsonl", external_id="bulk.jsonl"):
            expected[(f"bulk-{n}", document.external_id)] = len(get_splitter().split(document))
        job = upload_ingest(tenant=tenant, source_name=f"bulk-{n}", file_name="bulk.jsonl", data=data, options={})
        job_ids.append(job.pk)
    assert redis.Redis.from_url(BROKER).llen(job_queue) == JOBS
    partial_versions_seen = []

    def jobs() -> list[IngestionJob]:
        return list(IngestionJob.objects.filter(pk__in=job_ids).order_by("pk"))

    def check_and_wait(seconds: float, until) -> bool:
        """Watch the versions until ``until()`` or ``seconds``: a current version is always complete."""
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            for source, external_id, current, chunks in _versions_state(tenant.pk):
                if chunks != (expected[(source, external_id)] if current else 0):
                    partial_versions_seen.append((source, external_id, current, chunks))
            if until():
                return True
            time.sleep(0.05)
        return False

    log = tmp_path / "worker.log"
    workers = {name: Worker(job_queue, name, log) for name in ("first", "second")}
    try:
        # Both take a job at once (prefetch 1); kill whichever holds a job that is well under way.
        def running_midway() -> IngestionJob | None:
            return next(
                (j for j in jobs() if j.status == "running" and j.progress.get("chunks_embedded", 0) >= 32), None
            )

        assert check_and_wait(300, running_midway), log.read_text()[-3000:]
        victim_job = running_midway()
        victim_pid = int(victim_job.worker_id.rsplit("/", 1)[1])
        victim = next(name for name, w in workers.items() if w.process.pid == victim_pid)
        workers[victim].kill()
        survivor = workers[next(name for name in workers if name != victim)]
        assert IngestionJob.objects.get(pk=victim_job.pk).status == "running"

        # The live worker finishes its own jobs, then Redis gives it the killed worker's
        # unacknowledged message back (visibility timeout) and it takes that job over.
        assert check_and_wait(300, lambda: all(j.status in ("done", "failed") for j in jobs())), log.read_text()[-3000:]
    finally:
        for worker in workers.values():
            worker.stop()

    final = {j.pk: j for j in jobs()}
    assert [j.status for j in final.values()] == ["done"] * JOBS, [j.error for j in final.values()]
    taken_over = final[victim_job.pk]
    assert taken_over.attempts == 2 and taken_over.worker_id.endswith(f"/{survivor.process.pid}")
    assert all(j.attempts == 1 for pk, j in final.items() if pk != victim_job.pk)
    assert sum(j.result["created"] for j in final.values()) == JOBS * DOCUMENTS
    assert partial_versions_seen == []
    versions = DocumentVersion.objects.for_tenant(tenant).select_related("document__source")
    assert versions.count() == JOBS * DOCUMENTS and versions.filter(is_current=True).count() == JOBS * DOCUMENTS
    for version in versions:
        assert version.chunks.count() == expected[(version.document.source.name, version.document.external_id)]
