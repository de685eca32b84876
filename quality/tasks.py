"""Celery tasks of the quality app: thin wrappers that take ids and call a service."""

from __future__ import annotations

from celery import shared_task
from django.conf import settings

from quality.services import config_change_evaluate


@shared_task(
    acks_late=True,
    time_limit=settings.CELERY_TASK_TIME_LIMIT,
    soft_time_limit=max(settings.CELERY_TASK_TIME_LIMIT - 30, 10),
)
def config_change_task(change_id: int) -> str:
    """Evaluate retrieval-settings change ``change_id`` through the quality gate; returns its status.

    No retries: the service records any failure on the change, and a change that is no longer
    pending is never evaluated twice.
    """
    return config_change_evaluate(change_id=change_id).status
