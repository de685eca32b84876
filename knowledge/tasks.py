"""Celery tasks of the knowledge app: thin wrappers that take ids and call a service."""

from __future__ import annotations

from celery import shared_task
from django.conf import settings

from knowledge.services import ingestion_job_run


@shared_task(
    acks_late=True,
    time_limit=settings.CELERY_TASK_TIME_LIMIT,
    soft_time_limit=max(settings.CELERY_TASK_TIME_LIMIT - 30, 10),
)
def ingestion_job_task(job_id: int) -> str:
    """Run ingestion job ``job_id``; returns its final status.

    No retries: the service records bad input (and any other failure) on the job, and a
    job that is no longer pending is never run twice.
    """
    return ingestion_job_run(job_id=job_id).status
