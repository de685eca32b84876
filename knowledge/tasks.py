"""Celery tasks of the knowledge app: thin wrappers that take ids and call a service.

Row-level security: a task starts as the owner (``core.rls.rls_celery_connect``), reads its
object's tenant and runs the service inside ``tenant_context`` of that tenant, so even a service
that forgot its tenant filter touches no other tenant's rows. ``ingestion_jobs_recover_task`` and
``sources_sync_due_task`` span tenants and stay in the bypass (``docs/rls.md``).
"""

from __future__ import annotations

import os

from celery import Task, shared_task
from django.conf import settings

from core.rls import tenant_context, tenant_id_of
from knowledge import task_names
from knowledge.dedup.services import near_duplicates_refresh
from knowledge.enrichment.services import chunks_enrich
from knowledge.models import IngestionJob, SyncRun
from knowledge.services.embeddings import chunks_embed
from knowledge.services.maintenance import tables_maintain
from knowledge.services.sync import SyncBusy, sources_sync_due, sync_run_execute
from knowledge.services.uploads import (
    TRANSIENT_ERRORS,
    IngestionJobBusy,
    ingestion_job_fail,
    ingestion_job_run,
    ingestion_jobs_recover,
)
from knowledge.summaries.services import summaries_refresh


class IngestionJobTask(Task):
    """Marks the job failed once its task gives up (retries spent), unless a live worker holds it."""

    def on_failure(self, exc, task_id, args, kwargs, einfo):
        job_id = args[0] if args else kwargs.get("job_id")
        tenant_id = None if job_id is None else tenant_id_of(IngestionJob, job_id)
        if tenant_id is not None:
            with tenant_context(tenant_id):
                ingestion_job_fail(job_id=job_id, message=f"The job gave up after {self.request.retries} retries.")


# Options of the tasks that run a row under a lease (ingestion jobs, sync runs).
LEASED_TASK = {
    "bind": True,
    "acks_late": True,
    # A worker process killed mid-task (SIGKILL, out of memory) gets its message back to the
    # queue; the row's lease (and a job's attempts cap, KB_JOB_MAX_ATTEMPTS) decide what runs.
    "reject_on_worker_lost": True,
    "autoretry_for": TRANSIENT_ERRORS,
    "max_retries": settings.KB_JOB_MAX_RETRIES,
    "retry_backoff": True,
    "retry_backoff_max": settings.KB_JOB_RETRY_BACKOFF_MAX_S,
    "retry_jitter": True,
    "time_limit": settings.CELERY_TASK_TIME_LIMIT,
    "soft_time_limit": max(settings.CELERY_TASK_TIME_LIMIT - 30, 10),
}
# Options of the per-tenant steps queued after each ingestion (near-duplicates, enrichment, summaries).
TENANT_STEP_TASK = {"acks_late": True, "autoretry_for": TRANSIENT_ERRORS, "max_retries": 3, "retry_backoff": True}


def _leased_run(task: Task, model, row_id: int, execute, busy: type[Exception]) -> str:
    """``execute(row_id, worker_id=...)`` in the tenant's context of ``model`` row ``row_id``; its
    final status, or ``"missing"`` when the row is gone. ``busy`` (another worker's live lease)
    retries the task when that lease would run out."""
    tenant_id = tenant_id_of(model, row_id)
    if tenant_id is None:
        return "missing"
    try:
        with tenant_context(tenant_id):
            row = execute(row_id, worker_id=f"{task.request.hostname or 'worker'}/{os.getpid()}")
    except busy as held:
        raise task.retry(countdown=held.retry_in, exc=held) from held
    return row.status if row is not None else "missing"


@shared_task(name=task_names.INGESTION_JOB, base=IngestionJobTask, **LEASED_TASK)
def ingestion_job_task(self, job_id: int) -> str:
    """Run ingestion job ``job_id``; returns its final status (``"missing"`` if it was deleted).

    Temporary failures (database, embedding endpoint) are retried with exponential backoff; a
    job running under another worker's live lease is retried when that lease would run out
    (and taken over then if that worker died). Bad input is recorded on the job, not retried.
    """
    return _leased_run(
        self,
        IngestionJob,
        job_id,
        lambda pk, worker_id: ingestion_job_run(job_id=pk, worker_id=worker_id),
        IngestionJobBusy,
    )


@shared_task(name=task_names.INGESTION_JOBS_RECOVER, time_limit=300)
def ingestion_jobs_recover_task() -> list[int]:
    """Re-queue ingestion jobs whose worker died (lease ran out); runs under Celery beat.

    Spans every tenant's jobs, so it runs as the owner (the task's ``rls_bypass``); it only
    moves expired jobs back to pending, and each job then runs in its own tenant's context."""
    return ingestion_jobs_recover()


@shared_task(name=task_names.NEAR_DUPLICATES, time_limit=1800, **TENANT_STEP_TASK)
def near_duplicates_task(tenant_id: int) -> dict:
    """Find the near-duplicates of tenant ``tenant_id``'s new versions and rebuild its clusters
    (``knowledge.dedup.services.near_duplicates_refresh``); queued after each ingestion."""
    with tenant_context(tenant_id):
        return near_duplicates_refresh(tenant_id=tenant_id)


@shared_task(name=task_names.ENRICHMENT, time_limit=3600, **TENANT_STEP_TASK)
def enrichment_task(tenant_id: int) -> dict:
    """Enrich tenant ``tenant_id``'s chunks that have no enrichment yet (keyphrases, and questions
    with an LLM: ``knowledge.enrichment.services.chunks_enrich``); queued after each ingestion."""
    with tenant_context(tenant_id):
        return chunks_enrich(tenant_id=tenant_id)


@shared_task(name=task_names.SUMMARIES, time_limit=3600, **TENANT_STEP_TASK)
def summaries_task(tenant_id: int) -> dict:
    """Write the missing per-document summaries of tenant ``tenant_id``
    (``knowledge.summaries.services.summaries_refresh``); queued after each ingestion."""
    with tenant_context(tenant_id):
        return summaries_refresh(tenant_id=tenant_id)


@shared_task(name=task_names.SOURCE_SYNC, **LEASED_TASK)
def source_sync_task(self, run_id: int) -> str:
    """Run sync run ``run_id`` (``knowledge.services.sync.sync_run_execute``); returns its final status.

    A run under another worker's live lease is retried when that lease would run out (and taken
    over then if that worker died); temporary failures are retried with backoff.
    """
    return _leased_run(
        self, SyncRun, run_id, lambda pk, worker_id: sync_run_execute(run_id=pk, worker_id=worker_id), SyncBusy
    )


@shared_task(name=task_names.SOURCES_SYNC_DUE, time_limit=300)
def sources_sync_due_task() -> list[int]:
    """Queue the syncs that are due and re-queue runs whose worker died; runs under Celery beat.

    Spans every tenant's sources, so it runs as the owner; each run then runs in its own
    tenant's context."""
    return sources_sync_due()


@shared_task(name=task_names.TABLES_MAINTAIN, time_limit=1800)
def tables_maintain_task() -> dict:
    """``VACUUM (ANALYZE)`` the tables ingestions grow (``knowledge.services.maintenance``);
    queued, batched, after ingestions. Shared tables, so it runs as the owner."""
    return tables_maintain()


@shared_task(name=task_names.CHUNKS_EMBED, time_limit=settings.CELERY_TASK_TIME_LIMIT, **TENANT_STEP_TASK)
def chunks_embed_task(tenant_id: int) -> dict:
    """Embed tenant ``tenant_id``'s chunks stored without embeddings
    (``knowledge.services.embeddings.chunks_embed``); queued after each ingestion when
    ``KB_EMBED_QUEUE`` is set, and routed to that queue (``config.celery``)."""
    with tenant_context(tenant_id):
        return chunks_embed(tenant_id=tenant_id)
