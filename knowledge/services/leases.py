"""Leases on long-running rows (ingestion jobs, sync runs): who runs them, and until when.

A row with ``status``, ``worker_id``, ``lease_expires_at``, ``attempts``, ``started_at`` and
``progress`` is claimed with one conditional UPDATE (pending, or running under a lease that ran
out), so two workers never run it at once (the claim-by-conditional-UPDATE habit of
healthchecks' ``sendalerts``); the worker renews its lease from a thread every third of
``KB_JOB_LEASE_S``, and a worker that dies stops renewing, so its lease runs out and the row is
taken over.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Callable
from datetime import timedelta

from django.conf import settings
from django.db import DatabaseError, connection, models
from django.db.models import F, Q
from django.db.models.functions import Coalesce
from django.utils import timezone

logger = logging.getLogger(__name__)


def lease_claim(model: type[models.Model], pk: int, worker_id: str) -> bool:
    """Take row ``pk`` of ``model`` for ``worker_id`` if it is pending or its lease ran out.

    Sets it running under a fresh lease, counts the attempt and clears ``progress``. Returns
    whether this worker got it.
    """
    now = timezone.now()
    claimable = Q(status="pending") | Q(status="running", lease_expires_at__lt=now)
    return bool(
        model.objects.filter(claimable, pk=pk).update(
            status="running",
            worker_id=worker_id,
            lease_expires_at=now + timedelta(seconds=settings.KB_JOB_LEASE_S),
            attempts=F("attempts") + 1,
            started_at=Coalesce(F("started_at"), now),
            progress={},
        )
    )


def lease_claim_or_busy(
    model: type[models.Model],
    pk: int,
    worker_id: str,
    *,
    busy: Callable[[int, float], Exception],
    related: tuple[str, ...] = (),
) -> tuple[models.Model | None, bool]:
    """Claim row ``pk`` of ``model`` for ``worker_id`` (``lease_claim``) and read it back.

    Returns ``(row, claimed)``: ``(None, False)`` when the row is gone; ``(row, True)`` when this
    worker now runs it; ``(row, False)`` when it is finished (done, failed), for the caller to
    return as it is. A row running under another worker's live lease raises ``busy(pk,
    retry_in)``, ``retry_in`` being the seconds until that lease ends, plus one (at least 1).
    ``related``: the foreign keys read with the row (``select_related``).
    """
    claimed = lease_claim(model, pk, worker_id)
    row = model.objects.select_related(*related).filter(pk=pk).first()
    if row is None or claimed:
        return row, claimed
    if row.status == "running" and row.lease_expires_at is not None:
        raise busy(pk, max((row.lease_expires_at - timezone.now()).total_seconds(), 0) + 1)
    return row, False


def lease_held(
    model: type[models.Model], pk: int, worker_id: str, statuses: tuple[str, ...] = ("running",)
) -> models.QuerySet:
    """The row ``pk`` while ``worker_id`` still runs it (empty once another worker took it over, or
    once its status left ``statuses``)."""
    return model.objects.filter(pk=pk, worker_id=worker_id, status__in=statuses)


class LeaseHeartbeat:
    """Renews a row's lease every third of ``KB_JOB_LEASE_S`` from a thread while the work runs.

    Use as a context manager around the work. The thread uses its own database connection,
    closed when it stops. ``statuses``: the row's statuses in which the lease is renewed (a walk
    holds its lease while ``running`` and while ``paused``). ``around``: a context manager
    factory each renewal runs in (e.g. binding the row's tenant for row-level security).
    """

    def __init__(
        self,
        model: type[models.Model],
        pk: int,
        worker_id: str,
        *,
        statuses: tuple[str, ...] = ("running",),
        around=contextlib.nullcontext,
    ):
        self.model, self.pk, self.worker_id = model, pk, worker_id
        self.statuses, self.around = statuses, around
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"{model._meta.model_name}-{pk}-lease", daemon=True)

    def __enter__(self) -> LeaseHeartbeat:
        self._thread.start()
        return self

    def __exit__(self, *exc_info) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        lease = settings.KB_JOB_LEASE_S
        try:
            while not self._stop.wait(lease / 3):
                try:
                    with self.around():
                        lease_held(self.model, self.pk, self.worker_id, self.statuses).update(
                            lease_expires_at=timezone.now() + timedelta(seconds=lease)
                        )
                except DatabaseError:  # the main thread meets the same trouble and retries
                    logger.warning("Could not renew the lease of %s %s", self.model.__name__, self.pk, exc_info=True)
        finally:
            connection.close()
