"""The observer of answer-pipeline runs: write a run's trace after the answer, prune old traces.

``trace_save`` runs once per answered question, after the answer is made (never inside the
retrieval critical path): one transaction, one INSERT for the ``Trace`` and one ``bulk_create``
for its ``TraceStep`` rows. Step summaries are made JSON-safe and compact by
``summary_compact`` so a stage can put whatever it finds useful in its summary without bloating
the table.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import math
from collections.abc import Mapping
from decimal import Decimal
from numbers import Integral, Real
from typing import Any

from django.db import transaction
from django.utils import timezone

from core.errors import InvalidInput
from llm import Usage
from retrieval.models import Trace, TraceStep
from retrieval.types import Step

MAX_SUMMARY_ITEMS = 50  # items kept of any list (or mapping) in a summary
MAX_SUMMARY_CHARS = 2000  # characters kept of any string in a summary
_MAX_DEPTH = 8  # deeper values are stored as their (capped) text
PRUNE_BATCH_SIZE = 1000


def summary_compact(value: Any, *, _depth: int = 0) -> Any:
    """``value`` as compact, JSON-safe data.

    Lists, tuples and sets keep their first 50 items and mappings their first 50 entries (keys
    become strings); strings keep their first 2,000 characters (a cut string ends with "…").
    Non-finite floats become ``None``; decimals and numpy-like numbers become plain numbers;
    dates become ISO strings; dataclasses become dicts; anything else becomes its capped text.
    """
    if value is None or isinstance(value, bool):
        return value
    if isinstance(value, str):
        return _capped_text(value)
    if isinstance(value, Integral):
        return int(value)
    if isinstance(value, (Real, Decimal)):
        number = float(value)
        return number if math.isfinite(number) else None
    if isinstance(value, (dt.datetime, dt.date, dt.time)):
        return value.isoformat()
    if _depth >= _MAX_DEPTH:
        return _capped_text(repr(value))
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        value = {f.name: getattr(value, f.name) for f in dataclasses.fields(value)}
    if isinstance(value, Mapping):
        items = list(value.items())[:MAX_SUMMARY_ITEMS]
        return {_capped_text(str(k)): summary_compact(v, _depth=_depth + 1) for k, v in items}
    if isinstance(value, (list, tuple, set, frozenset)):
        items = sorted(value, key=repr) if isinstance(value, (set, frozenset)) else value
        return [summary_compact(v, _depth=_depth + 1) for v in list(items)[:MAX_SUMMARY_ITEMS]]
    if isinstance(value, bytes):
        return _capped_text(value.decode("utf-8", errors="replace"))
    return _capped_text(str(value))


def _capped_text(text: str) -> str:
    # PostgreSQL's jsonb rejects NUL characters.
    text = text.replace("\x00", "")
    return text if len(text) <= MAX_SUMMARY_CHARS else text[: MAX_SUMMARY_CHARS - 1] + "…"


def _count(value: int) -> int:
    return max(int(value or 0), 0)


def _ms(value: float) -> float:
    number = float(value or 0.0)
    return max(number, 0.0) if math.isfinite(number) else 0.0


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
        total_ms=_ms(total_ms),
        llm_calls=_count(usage.llm_calls),
        tokens_in=_count(usage.tokens_in),
        tokens_out=_count(usage.tokens_out),
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
                ms=_ms(step.ms),
                summary=summary_compact(step.summary or {}),
                error=step.error,
                tokens_in=_count(step.usage.tokens_in),
                tokens_out=_count(step.usage.tokens_out),
            )
            for order, step in enumerate(steps, start=1)
        )
    return trace


def traces_prune(*, older_than_days: int) -> int:
    """Delete every tenant's traces (and their steps) created more than ``older_than_days`` ago.

    Deletes in batches of ``PRUNE_BATCH_SIZE`` traces, each in its own short transaction, so a
    large backlog never holds long locks. Returns the number of traces deleted.
    """
    if older_than_days < 1:
        raise InvalidInput(f"older_than_days must be at least 1, not {older_than_days}.")
    cutoff = timezone.now() - dt.timedelta(days=older_than_days)
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
