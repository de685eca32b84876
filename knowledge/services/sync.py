"""Sync: a source's documents brought in line with what its connector reads (every kind: folder,
web, git and the services).

One run (``SyncRun``) per source at a time, under a lease like ingestion jobs
(``knowledge.services.leases``); the run itself is ``knowledge.services.sync_runner``:

1. the connector gives what changed (a file kind: every file whose cheap check differs from the
   stored one, so unchanged files are neither read nor embedded; a service: what changed since
   the stored checkpoint);
2. read items are ingested in batches (``documents_ingest``: a changed text becomes a new
   version, equal text stays unchanged, exact and near-duplicate handling as usual); a batch that
   fails is retried item by item, so one bad document fails alone and is recorded on the run;
3. documents the source held but its listing no longer names are marked deleted
   (``knowledge.services.deletion.document_mark_deleted``): they leave current results and
   counts, and ``as_of`` searches before the deletion still find them;
4. a service source's permissions are brought in line (``knowledge.permissions``).

This module queues runs, claims them under a lease, records their outcome, and schedules them
(``sources_sync_due``: content every ``sync_every``, a service's permissions every ``perm_every``).
A source that cannot be reached (``SourceUnreachable``) fails the run with the reason and changes
nothing more.
"""

from __future__ import annotations

import logging
import time
from contextlib import nullcontext
from datetime import timedelta
from functools import partial

from django.conf import settings
from django.db import IntegrityError, transaction
from django.db.models import F, Q
from django.utils import timezone

from core import metrics
from core.audit import SYSTEM_SCHEDULE, audit_actor, audit_record
from core.errors import ApplicationError, InvalidInput, NotFound
from core.models import Tenant
from core.queue import task_send
from knowledge import task_names
from knowledge.connectors import SourceUnreachable, connector_for
from knowledge.models import Source, SyncRun
from knowledge.quotas import QuotaExceeded, sync_quota_check, sync_quota_exhausted
from knowledge.services.leases import LeaseHeartbeat, lease_claim_or_busy, lease_held
from knowledge.services.sync_runner import sync_steps
from knowledge.services.uploads import TRANSIENT_ERRORS, worker_id_default

logger = logging.getLogger(__name__)


class SyncBusy(Exception):
    """The run is going on under another worker's live lease; try again in ``retry_in`` seconds."""

    def __init__(self, run_id: int, retry_in: float):
        super().__init__(f"Sync run {run_id} is running elsewhere; its lease ends in {retry_in:.0f} s.")
        self.retry_in = retry_in


def sync_run_request(
    *, source: Source, trigger: str = SyncRun.Trigger.MANUAL, enqueue: bool = True, scope: str = SyncRun.Scope.ALL
) -> SyncRun:
    """Queue a sync of ``source`` (run at once without a broker). Returns the run.

    ``scope`` (service sources): ``"all"``, ``"content"`` or ``"permissions"``
    (``knowledge.services.sync_runner``); the file kinds always sync everything.

    ``enqueue=False`` only records the run, pending: the caller runs it (``sync_run_execute``),
    e.g. in a background thread of its own process, and it shows as syncing meanwhile.

    When a run of the source is already pending or running, that run is returned instead (one
    run per source at a time). ``InvalidInput`` (code ``not_synced``) for a source filled by
    hand; ``QuotaExceeded`` (429, code ``quota_exceeded``) when the tenant has started its limit
    of syncs in the last 24 hours (``knowledge.quotas.sync_quota_check``).
    """
    connector_for(source)  # refuses kinds that are not synced
    try:
        with transaction.atomic():
            if _scope(source, scope) != SyncRun.Scope.PERMISSIONS:  # permission syncs read no content
                sync_quota_check(tenant=source.tenant_id)
            run = SyncRun.objects.create(
                tenant_id=source.tenant_id, source=source, trigger=trigger, scope=_scope(source, scope)
            )
            _sync_audit(run)
            if enqueue:
                transaction.on_commit(partial(_run_enqueue, run.pk))
    except IntegrityError:  # syncrun_one_active_per_source
        active = SyncRun.objects.filter(source=source, status__in=["pending", "running"]).first()
        if active is None:  # it finished in between
            return sync_run_request(source=source, trigger=trigger, enqueue=enqueue, scope=scope)
        return active
    run.refresh_from_db()
    return run


def _scope(source: Source, scope: str) -> str:
    """``scope`` checked: a value of ``SyncRun.Scope`` (``InvalidInput`` otherwise); ``"all"`` for the file kinds."""
    if scope not in SyncRun.Scope.values:
        raise InvalidInput(f"scope is one of {', '.join(SyncRun.Scope.values)}, not {scope!r}.", code="invalid_scope")
    return scope if source.is_service else SyncRun.Scope.ALL


def _sync_audit(run: SyncRun) -> None:
    """Record the start of sync run ``run`` in the audit log (``source.synced``; by
    ``system (schedule)`` for Celery beat's runs, else by whoever asked)."""
    with audit_actor(SYSTEM_SCHEDULE) if run.trigger == SyncRun.Trigger.SCHEDULE else nullcontext():
        audit_record(
            action="source.synced",
            tenant=run.tenant_id,
            obj=run.source,
            changes={"run": run.pk, "trigger": run.trigger, "scope": run.scope},
        )


def _run_enqueue(run_id: int) -> None:
    """Queue the run's task; a run that cannot be queued (broker down) is failed, not left pending."""
    try:
        task_send(task_names.SOURCE_SYNC, run_id)
    except Exception:
        logger.exception("Could not queue or run sync run %s", run_id)
        SyncRun.objects.filter(pk=run_id, status=SyncRun.Status.PENDING).update(
            status=SyncRun.Status.FAILED,
            error="The sync could not be queued or run (is the broker running?). Nothing changed.",
            finished_at=timezone.now(),
        )


def source_sync(
    *,
    source: Source,
    trigger: str = SyncRun.Trigger.MANUAL,
    worker_id: str | None = None,
    progress: bool = False,
    scope: str = SyncRun.Scope.ALL,
) -> SyncRun:
    """Sync ``source`` in this process and return the finished run (``manage.py source sync``).

    ``progress`` shows a progress bar over the files read; ``scope`` as ``sync_run_request``.
    ``InvalidInput`` (code ``sync_running``) when another run of the source is going on;
    ``QuotaExceeded`` (429) past the tenant's syncs a day, as ``sync_run_request``.
    """
    connector_for(source)
    try:
        with transaction.atomic():
            if _scope(source, scope) != SyncRun.Scope.PERMISSIONS:  # permission syncs read no content
                sync_quota_check(tenant=source.tenant_id)
            run = SyncRun.objects.create(
                tenant_id=source.tenant_id, source=source, trigger=trigger, scope=_scope(source, scope)
            )
            _sync_audit(run)
    except IntegrityError:
        raise InvalidInput(
            f"A sync of {source.name!r} is already going on; wait for it to finish.", code="sync_running"
        ) from None
    return sync_run_execute(run_id=run.pk, worker_id=worker_id, progress=progress)


def sync_run_execute(*, run_id: int, worker_id: str | None = None, progress: bool = False) -> SyncRun | None:
    """Run ``SyncRun`` ``run_id`` under a lease; returns the run as it ended (None if deleted).

    Claimed when pending or its lease ran out (its worker died); a finished run is returned as
    it is, and one under another worker's live lease raises ``SyncBusy``. Transient failures
    (database, embedding endpoint) put the run back to pending and propagate for a retry.
    """
    worker_id = worker_id or worker_id_default()
    run, claimed = lease_claim_or_busy(SyncRun, run_id, worker_id, busy=SyncBusy, related=("source", "tenant"))
    if run is None or not claimed:
        return run
    started = time.perf_counter()
    with LeaseHeartbeat(SyncRun, run_id, worker_id):
        try:
            outcome = _sync(run, worker_id, progress=progress)
        except TRANSIENT_ERRORS:
            lease_held(SyncRun, run_id, worker_id).update(
                status=SyncRun.Status.PENDING, worker_id="", lease_expires_at=None
            )
            metrics.sync_run_observe(kind=run.source.kind, status="retry", seconds=time.perf_counter() - started)
            raise
        except SourceUnreachable as exc:
            outcome = {"status": SyncRun.Status.FAILED, "error": f"{exc.message} Nothing changed."}
        except ApplicationError as exc:
            outcome = {"status": SyncRun.Status.FAILED, "error": exc.message}
        except Exception:
            logger.exception("Sync run %s failed", run_id)
            outcome = {
                "status": SyncRun.Status.FAILED,
                "error": "The sync failed unexpectedly (the details are in the server log).",
            }
    finished = timezone.now()
    if lease_held(SyncRun, run_id, worker_id).update(finished_at=finished, lease_expires_at=None, **outcome):
        if outcome["status"] == SyncRun.Status.DONE and run.scope != SyncRun.Scope.PERMISSIONS:
            Source.objects.filter(pk=run.source_id).update(last_synced_at=finished)
        metrics.sync_run_observe(
            kind=run.source.kind, status=outcome["status"], seconds=time.perf_counter() - started, counts=outcome
        )
    else:
        logger.warning("Sync run %s was taken over by another worker; its outcome is theirs to record", run_id)
    run.refresh_from_db()
    return run


def _sync(run: SyncRun, worker_id: str, *, progress: bool = False) -> dict:
    """The sync itself (``knowledge.services.sync_runner``); returns the run's final fields."""
    return sync_steps(run, lease_held(SyncRun, run.pk, worker_id), progress=progress)


def sources_sync_due(*, now=None, limit: int = 100) -> list[int]:
    """Queue the runs that are due (Celery beat). Returns the queued run ids.

    Re-queues runs whose lease ran out (their worker died), then starts a run for each source
    with a schedule (``sync_every``) whose last run started at least that long ago and that has
    no run going on. Spans every tenant (runs as the owner under row-level security). A tenant
    that has started its limit of syncs in the last 24 hours (``knowledge.quotas``) has its due
    syncs skipped, not failed: they start on the first beat after the window frees a run.
    """
    now = now or timezone.now()
    queued = []
    stale = SyncRun.objects.filter(status=SyncRun.Status.RUNNING, lease_expires_at__lt=now)
    for run_id in stale.values_list("pk", flat=True)[:limit]:
        with transaction.atomic():
            if stale.filter(pk=run_id).update(status=SyncRun.Status.PENDING, worker_id="", lease_expires_at=None):
                queued.append(run_id)
                transaction.on_commit(partial(_run_enqueue, run_id))
    due = (
        Source.objects.filter(kind__in=Source.SYNCED_KINDS, sync_every__isnull=False)
        .exclude(sync_runs__status__in=["pending", "running"])
        .filter(Q(last_synced_at__isnull=True) | Q(last_synced_at__lte=now - F("sync_every")))
        .exclude(tenant_id__in=sync_quota_exhausted(now=now))
    )
    for source in due.order_by(F("last_synced_at").asc(nulls_first=True))[:limit]:
        last = source.sync_runs.order_by("-created_at").values_list("created_at", flat=True).first()
        if last is not None and last > now - source.sync_every:  # a failed run retries on the schedule
            continue
        scope = SyncRun.Scope.CONTENT if source.is_service and not _permissions_due(source, now) else "all"
        try:
            run = sync_run_request(source=source, trigger=SyncRun.Trigger.SCHEDULE, scope=scope)
        except QuotaExceeded as exc:  # the tenant's last run of the day went to another source
            logger.info("Scheduled sync of %s skipped: %s", source, exc.message)
            continue
        queued.append(run.pk)
    queued += _permission_syncs_due(now=now, limit=limit)
    return queued


def _permissions_due(source: Source, now) -> bool:
    """Whether a service source's permission sync is due (``perm_every``, else ``KB_PERM_SYNC_EVERY_S``)."""
    every = source.perm_every or timedelta(seconds=settings.KB_PERM_SYNC_EVERY_S)
    return source.last_perm_synced_at is None or source.last_perm_synced_at <= now - every


def _permission_syncs_due(*, now, limit: int) -> list[int]:
    """Queue a permission sync (``scope="permissions"``) for each service source synced at least
    once (on a schedule or by hand: a removed reader must lose access either way) whose permission
    sync is due and that has no run going on; returns the run ids."""
    queued = []
    sources = (
        Source.objects.filter(kind__in=Source.SERVICE_KINDS, last_synced_at__isnull=False)
        .exclude(sync_runs__status__in=["pending", "running"])
        .order_by(F("last_perm_synced_at").asc(nulls_first=True))
    )
    for source in sources[: limit * 4]:
        if len(queued) >= limit:
            break
        if _permissions_due(source, now):
            run = sync_run_request(source=source, trigger=SyncRun.Trigger.SCHEDULE, scope=SyncRun.Scope.PERMISSIONS)
            queued.append(run.pk)
    return queued


def sync_run_get(*, tenant: Tenant, run_id: int) -> SyncRun:
    """One of the tenant's sync runs; ``NotFound`` otherwise."""
    run = SyncRun.objects.for_tenant(tenant).select_related("source").filter(pk=run_id).first()
    if run is None:
        raise NotFound(f"Sync run {run_id} not found.")
    return run
