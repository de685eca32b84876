"""Celery tasks of the retrieval app: thin wrappers that call a service."""

from __future__ import annotations

from celery import shared_task
from django.conf import settings

from retrieval.traces import traces_prune


@shared_task(time_limit=600, soft_time_limit=570)
def traces_prune_task() -> int:
    """Delete traces older than ``KB_TRACE_RETENTION_DAYS``; returns how many. Run daily by beat.

    A retention sweep over every tenant: it runs as the owner (the task's ``rls_bypass``,
    ``core.rls.rls_celery_connect``), the documented cross-tenant exception (``docs/rls.md``)."""
    return traces_prune(older_than_days=settings.KB_TRACE_RETENTION_DAYS)


@shared_task(time_limit=3600, soft_time_limit=3570)
def walk_run_task(walk_id: int) -> str:
    """Run steered walk ``walk_id`` to its answer (``retrieval.walks.steering.walk_execute``); its
    status. Binds the walk's tenant itself. A paused walk holds the worker until a person resumes
    or stops it, or ``KB_WALK_PAUSE_TIMEOUT_S`` runs out."""
    from retrieval.pipeline import pipeline_answer
    from retrieval.walks.steering import walk_execute

    return walk_execute(walk_id=walk_id, answer=pipeline_answer).status


@shared_task(time_limit=300, soft_time_limit=270)
def walks_recover_task() -> list[int]:
    """Launch again the steered walks whose process stopped (``retrieval.walks.steering.walks_recover``);
    their ids. Unsteered walks left running by a stopped answer request end as failed
    (``walks_abandoned_fail``). Run by beat every ``KB_JOB_LEASE_S``: a sweep over every tenant,
    run as the owner (the task's ``rls_bypass``), like the other recovery sweeps (``docs/rls.md``)."""
    from retrieval.walks.steering import walks_abandoned_fail, walks_recover

    walks_abandoned_fail()
    return walks_recover()
