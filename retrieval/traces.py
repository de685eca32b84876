"""The stored trace of an answer: written once, after the answer is made, and pruned daily.

``trace_save`` runs once per answered question, never inside the retrieval critical path: one
transaction, one INSERT for the ``Trace`` and one ``bulk_create`` for its ``TraceStep`` rows, the
step summaries compacted by ``retrieval.tracing.summary_compact``. ``traces_prune`` is the
retention sweep (``KB_TRACE_RETENTION_DAYS``). Apart from ``retrieval.tracing`` (spans and
metrics) so that the run's state, which reports its steps there, never imports the models.
"""

from __future__ import annotations

import datetime as dt
import math
from decimal import Decimal

from django.db import transaction
from django.utils import timezone

from core.errors import InvalidInput
from knowledge.models import LLMUsage
from llm import Usage
from retrieval.models import Trace, TraceStep
from retrieval.tracing import count_clean, ms_clean, summary_compact
from retrieval.types import Step

PRUNE_BATCH_SIZE = 1000


def trace_save(
    *,
    tenant,
    user,
    pipeline: str,
    question: str,
    answer: str,
    steps: list[Step],
    usage: Usage,
    degraded: bool,
    error: str = "",
    total_ms: float,
    config: dict | None = None,
    scores: dict | None = None,
    citations: list[dict] | None = None,
) -> Trace:
    """Store the trace of one pipeline run with its steps in run order; returns the trace.

    ``user`` may be ``None`` or anonymous (stored as no user). ``scores`` are the answer's
    quality scores (``retrieval.stages.score``; stored as ``{}`` when ``None``); ``citations`` are
    ``{"n", "chunk_id", "document_id", "source_id"}`` of the answer's ``[n]``. Call it after
    the answer is made: it is one transaction of one INSERT and one bulk INSERT.
    """
    cost = float(usage.cost_usd or 0.0)
    trace = Trace(
        tenant=tenant,
        user=user if user is not None and user.is_authenticated else None,
        pipeline=pipeline,
        question=question,
        answer=answer,
        degraded=degraded,
        error=error,
        total_ms=ms_clean(total_ms),
        llm_calls=count_clean(usage.llm_calls),
        tokens_in=count_clean(usage.tokens_in),
        tokens_out=count_clean(usage.tokens_out),
        cost_usd=Decimal(str(round(cost, 6))) if math.isfinite(cost) and cost > 0 else Decimal(0),
        config=summary_compact(config or {}),
        scores=summary_compact(scores or {}),
        citations=summary_compact(citations or []),
    )
    with transaction.atomic():
        trace.save(force_insert=True)
        TraceStep.objects.bulk_create(
            TraceStep(
                tenant_id=trace.tenant_id,
                trace=trace,
                order=order,
                stage=step.stage,
                ms=ms_clean(step.ms),
                summary=summary_compact(step.summary or {}),
                error=step.error,
                tokens_in=count_clean(step.usage.tokens_in),
                tokens_out=count_clean(step.usage.tokens_out),
            )
            for order, step in enumerate(steps, start=1)
        )
    return trace


def traces_prune(*, older_than_days: int) -> int:
    """Delete every tenant's traces (and their steps) created more than ``older_than_days`` ago,
    and the ``LLMUsage`` records as old (the LLM tokens quota reads only the last 24 hours).

    Deletes in batches of ``PRUNE_BATCH_SIZE`` rows, each in its own short transaction, so a
    large backlog never holds long locks. Returns the number of traces deleted.
    """
    if older_than_days < 1:
        raise InvalidInput(f"older_than_days must be at least 1, not {older_than_days}.")
    cutoff = timezone.now() - dt.timedelta(days=older_than_days)
    while True:
        ids = list(
            LLMUsage.objects.filter(created_at__lt=cutoff).order_by().values_list("pk", flat=True)[:PRUNE_BATCH_SIZE]
        )
        if not ids:
            break
        LLMUsage.objects.filter(pk__in=ids).delete()
    deleted = 0
    while True:
        ids = list(
            Trace.objects.filter(created_at__lt=cutoff).order_by().values_list("pk", flat=True)[:PRUNE_BATCH_SIZE]
        )
        if not ids:
            return deleted
        with transaction.atomic():
            _, per_model = Trace.objects.filter(pk__in=ids).delete()
        deleted += per_model.get(Trace._meta.label, 0)
