"""Walks a person steers: start one, watch its rounds, pause it, edit it, resume or stop it.

Seed ``walkingrag-multi-turn.txt``: "users can interrupt cycles, modify outputs or questions, and
return control to the system to steer it in a new direction". ``walk_start`` records a steered
``Walk`` and runs it in the background: as a Celery task with a broker (``CELERY_BROKER_URL``),
else in a thread of this process. The run is the WalkingRAG pipeline with a ``WalkRecorder``
(``retrieval.walks.recorder``), which pauses after the ``pause_after`` round or when a person asks
(``walk_pause``) and waits there. While it is paused a person edits it (``walk_edit``: the
question, facts removed or corrected, next queries added or removed) and resumes it
(``walk_resume``) or stops it (``walk_stop``: it answers from what it has). A paused walk answers
by itself after ``KB_WALK_PAUSE_TIMEOUT_S``. A walk is its asker's: nobody else reads or steers it.

The process running a walk holds a lease on it (``knowledge.services.leases``: claimed with one
conditional UPDATE, renewed from a thread every third of ``KB_JOB_LEASE_S``, also while the walk
waits paused). A process that stops (killed, restarted, deployed over) stops renewing;
``walks_recover`` (Celery beat with a broker, and whenever the asker reads the walk) launches a
walk whose lease ran out again, and it goes on from its last recorded round
(``WalkRecorder.resumed``), still paused if it was, its pause deadline unchanged.
"""

from __future__ import annotations

import contextvars
import logging
import threading
import uuid
from collections.abc import Callable
from datetime import timedelta
from functools import partial
from typing import Any

from django.conf import settings
from django.db import connections, transaction
from django.db.models import Q
from django.utils import timezone

from core.errors import Conflict, InvalidInput, NotFound
from core.queue import task_send
from core.rls import tenant_context
from knowledge.services.leases import LeaseHeartbeat
from knowledge.services.uploads import worker_id_default
from retrieval import task_names
from retrieval.config import MAX_QUERY_CHARS
from retrieval.request import AnswerRequest
from retrieval.walks.memory import fact_correct, walk_facts_retire
from retrieval.walks.models import Fact, Walk
from retrieval.walks.recorder import WalkRecorder, WalkTakenOver

logger = logging.getLogger(__name__)

MAX_PAUSE_AFTER = 10
MAX_NEXT_QUERIES = 10
LIVE_STATUSES = ("running", "paused")  # a walk a process runs or should run
# An unsteered walk is part of one answer request: one still running this long after its last
# write lost the process answering it (no request runs for an hour).
ABANDONED_AFTER_S = 3600


def _question_clean(question: str) -> str:
    question = " ".join((question or "").split())
    if not question:
        raise InvalidInput("The question is empty.")
    if len(question) > MAX_QUERY_CHARS:
        raise InvalidInput(f"The question is longer than {MAX_QUERY_CHARS} characters.")
    return question


def walk_get(*, tenant, user, walk_id: int) -> Walk:
    """The walk ``walk_id`` of ``user`` in ``tenant``; ``NotFound`` for anyone else's (or none)."""
    walk = Walk.objects.for_tenant(tenant).filter(pk=walk_id, user=user, steered=True).first()
    if walk is None:
        raise NotFound(f"No walk {walk_id}.")
    if _stale(walk):  # its process stopped: take it over (reading it is enough, with or without beat)
        walks_recover(tenant_id=walk.tenant_id, walk_ids=[walk.pk])
    return walk


def walk_start(*, tenant, user, question: str, pause_after: int | None = None, k: int = 5) -> Walk:
    """Record a steered walk of ``user`` over ``tenant``'s documents and start it once the
    transaction commits (module docstring). ``pause_after``: pause after that round (1-10);
    ``k``: chunks read per query per round (1-20). ``InvalidInput`` for an empty or over-long
    question or a bad ``pause_after`` or ``k``."""
    question = _question_clean(question)
    if pause_after is not None and not 1 <= pause_after <= MAX_PAUSE_AFTER:
        raise InvalidInput(f"pause_after must be between 1 and {MAX_PAUSE_AFTER}.")
    if not 1 <= k <= 20:
        raise InvalidInput("k must be between 1 and 20.")
    walk = Walk.objects.create(
        tenant=tenant,
        user=user,
        question=question,
        pause_after=pause_after,
        k=k,
        steered=True,
        status="running",
        # Until a process claims it: a walk whose launch was lost is launched again once this runs out.
        lease_expires_at=timezone.now() + timedelta(seconds=settings.KB_JOB_LEASE_S),
    )
    transaction.on_commit(lambda: _launch(walk.pk))
    return walk


def _launch(walk_id: int) -> None:
    """Run the walk: a Celery task with a broker, a daemon thread of this process without one."""
    if not settings.CELERY_TASK_ALWAYS_EAGER:
        task_send(task_names.WALK_RUN, walk_id)
        return

    def run() -> None:
        try:
            task_send(task_names.WALK_RUN, walk_id)  # without a broker: the task, here, in this thread
        finally:
            connections.close_all()

    context = contextvars.copy_context()  # the audit actor and telemetry context
    threading.Thread(target=context.run, args=(run,), name=f"walk-{walk_id}", daemon=True).start()


def walk_execute(
    *, walk_id: int, answer: Callable[..., Any], tenant_id: int | None = None, llm=None, worker_id: str | None = None
) -> Walk:
    """Run steered walk ``walk_id`` to its answer here (the task's and the thread's body).

    Claims the walk's lease first (``worker_id``: default this process and thread); a walk that
    ended, or that another live process holds, is left alone and returned as it is. Binds the
    walk's tenant (row-level security), answers through the WalkingRAG pipeline with ``answer``
    (``retrieval.pipeline.pipeline_answer``, passed in by the task: the pipeline imports this
    package's stage, so this package does not import the pipeline) with the walk's recorder (``llm``: an ``LLMClient``; default the configured one), going on from its last
    round when an earlier process stopped mid-walk. A run that raises leaves the walk ``failed``
    with the error; the exception is logged, not raised."""
    if tenant_id is None:
        tenant_id = Walk.objects.values_list("tenant_id", flat=True).get(pk=walk_id)
    worker_id = worker_id or f"{worker_id_default()}/{uuid.uuid4().hex[:8]}"
    with tenant_context(tenant_id):
        if not _claim(walk_id, tenant_id, worker_id):
            return Walk.objects.for_tenant(tenant_id).get(pk=walk_id)
        walk = Walk.objects.for_tenant(tenant_id).select_related("tenant", "user").get(pk=walk_id)
        with LeaseHeartbeat(
            Walk, walk_id, worker_id, statuses=LIVE_STATUSES, around=partial(tenant_context, tenant_id)
        ):
            try:
                answer(
                    AnswerRequest(question=walk.question, k=walk.k, pipeline="walkingrag"),
                    tenant=walk.tenant,
                    user=walk.user,
                    walk=WalkRecorder(walk, worker_id=worker_id),
                    **({} if llm is None else {"llm": llm}),
                )
            except WalkTakenOver:
                logger.warning("Walk %s was taken over by another process; this run ends", walk_id)
            except Exception as exc:
                logger.exception("Walk %s failed", walk_id)
                Walk.objects.for_tenant(tenant_id).filter(pk=walk_id, worker_id=worker_id).update(
                    status="failed", error=str(exc)[:2000], finished_at=timezone.now(), updated_at=timezone.now()
                )
        walk.refresh_from_db()
    return walk


def _claimable(now) -> Q:
    """A live walk nobody runs: never claimed (or handed over for a relaunch), or its lease ran out."""
    return Q(status__in=LIVE_STATUSES) & (Q(worker_id="") | Q(lease_expires_at__lt=now))


def _claim(walk_id: int, tenant_id: int, worker_id: str) -> bool:
    """Take the walk's lease for ``worker_id`` with one conditional UPDATE; whether it got it."""
    now = timezone.now()
    return bool(
        Walk.objects.for_tenant(tenant_id)
        .filter(_claimable(now), pk=walk_id)
        .update(worker_id=worker_id, lease_expires_at=now + timedelta(seconds=settings.KB_JOB_LEASE_S))
    )


def _stale(walk: Walk) -> bool:
    """A live walk whose process stopped renewing its lease."""
    expires = walk.lease_expires_at
    return walk.status in LIVE_STATUSES and expires is not None and expires < timezone.now()


def walks_recover(*, tenant_id: int | None = None, walk_ids: list[int] | None = None, limit: int = 100) -> list[int]:
    """Launch again the steered walks whose lease ran out (their process stopped); their ids.

    Each is handed over with a conditional UPDATE (worker cleared, the lease held for the
    relaunch, so two recoveries never launch one walk twice in a lease period) and launched once
    committed; the new run claims it and goes on from its last round (module docstring).
    ``tenant_id``: only that tenant's walks (else every tenant's: the Celery beat sweep, run as
    the owner); ``walk_ids``: only those.
    """
    now = timezone.now()
    stale = Walk.objects.filter(steered=True, status__in=LIVE_STATUSES, lease_expires_at__lt=now)
    if tenant_id is not None:
        stale = stale.for_tenant(tenant_id)
    if walk_ids is not None:
        stale = stale.filter(pk__in=walk_ids)
    recovered = []
    for walk_id in stale.order_by("lease_expires_at").values_list("pk", flat=True)[:limit]:
        with transaction.atomic():
            held = now + timedelta(seconds=settings.KB_JOB_LEASE_S)
            if stale.filter(pk=walk_id).update(worker_id="", lease_expires_at=held):
                recovered.append(walk_id)
                transaction.on_commit(partial(_launch, walk_id))
    if recovered:
        logger.warning("Walks whose process stopped, launched again: %s", recovered)
    return recovered


def walks_abandoned_fail(*, older_than_s: float = ABANDONED_AFTER_S) -> int:
    """End as ``failed`` the unsteered walks still ``running`` ``older_than_s`` seconds after their
    last write: the answer request that ran each one stopped with its process, and nobody can
    resume it (the asker got no answer to go back to). Every tenant's (the beat sweep, run as the
    owner). Returns how many."""
    cutoff = timezone.now() - timedelta(seconds=older_than_s)
    return Walk.objects.filter(steered=False, status="running", updated_at__lt=cutoff).update(
        status="failed",
        error="The process answering it stopped before the walk ended.",
        finished_at=timezone.now(),
        updated_at=timezone.now(),
    )


def _locked(walk: Walk) -> Walk:
    return Walk.objects.select_for_update().get(pk=walk.pk)


@transaction.atomic
def walk_pause(*, walk: Walk) -> Walk:
    """Ask a running walk to pause after its current round; ``Conflict`` when it has ended."""
    walk = _locked(walk)
    if walk.finished:
        raise Conflict(f"The walk is {walk.status}; only a running walk can pause.")
    if walk.status == "running":
        walk.pause_requested = True
        walk.save(update_fields=["pause_requested", "updated_at"])
    return walk


@transaction.atomic
def walk_resume(*, walk: Walk) -> Walk:
    """Let a paused walk go on from its (edited) state; ``Conflict`` unless it is paused."""
    walk = _locked(walk)
    if walk.status != "paused":
        raise Conflict(f"The walk is {walk.status}; only a paused walk can resume.")
    walk.status, walk.pause_after = "running", None
    walk.save(update_fields=["status", "pause_after", "updated_at"])
    return walk


@transaction.atomic
def walk_stop(*, walk: Walk) -> Walk:
    """Stop a running or paused walk: it answers from the facts it has. ``Conflict`` once it ended."""
    walk = _locked(walk)
    if walk.finished:
        raise Conflict(f"The walk is {walk.status} already.")
    walk.stop_requested = True
    walk.save(update_fields=["stop_requested", "updated_at"])
    return walk


@transaction.atomic
def walk_edit(
    *,
    walk: Walk,
    question: str | None = None,
    remove_facts: list[int] | None = None,
    edit_facts: dict[int, str] | None = None,
    next_queries: list[str] | None = None,
    add_queries: list[str] | None = None,
    remove_queries: list[str] | None = None,
) -> Walk:
    """Edit a paused walk; every change applies or none does.

    ``question``: the new question. ``remove_facts``: ids of the walk's facts not to use (each is
    retired as wrong, so memory never serves it either). ``edit_facts``: ``{fact id: corrected
    text}``. ``next_queries`` replaces the next round's queries; ``add_queries`` and
    ``remove_queries`` change them. ``Conflict`` unless the walk is paused; ``InvalidInput`` for
    an empty question or fact, an unknown fact, or more than ``MAX_NEXT_QUERIES`` queries."""
    walk = _locked(walk)
    if walk.status != "paused":
        raise Conflict(f"The walk is {walk.status}; a walk is edited while it is paused.")
    fields = ["updated_at"]
    if question is not None:
        walk.question = _question_clean(question)
        fields.append("question")
    queries = list(walk.next_queries) if next_queries is None else [" ".join(q.split()) for q in next_queries]
    for query in add_queries or []:
        query = " ".join(query.split())
        if query and query.lower() not in {q.lower() for q in queries}:
            queries.append(query)
    dropped = {" ".join(q.split()).lower() for q in remove_queries or []}
    queries = [q for q in queries if q and q.lower() not in dropped]
    if any(len(q) > MAX_QUERY_CHARS for q in queries):
        raise InvalidInput(f"A query is longer than {MAX_QUERY_CHARS} characters.")
    if len(queries) > MAX_NEXT_QUERIES:
        raise InvalidInput(f"At most {MAX_NEXT_QUERIES} next queries.")
    if queries != walk.next_queries:
        walk.next_queries = queries
        fields.append("next_queries")
    if edit_facts:
        facts = {f.pk: f for f in Fact.objects.for_tenant(walk.tenant_id).filter(walk=walk, pk__in=list(edit_facts))}
        for fact_id, text in edit_facts.items():
            if fact_id not in facts:
                raise InvalidInput(f"No fact {fact_id} in this walk.")
            fact_correct(fact=facts[fact_id], text=text)
    if remove_facts:
        walk_facts_retire(walk=walk, fact_ids=list(remove_facts))
    walk.save(update_fields=fields)
    return walk
