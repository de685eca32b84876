"""Traces of answer-pipeline runs: what each stage did, how long it took and what it cost.

A ``Trace`` is written once, after the answer (``retrieval.traces.trace_save``), with one
``TraceStep`` per stage in run order. It keeps its own copy of the question, the answer and the
pipeline's configuration, so it can be read without re-running anything. Old traces are removed
by ``retrieval.traces.traces_prune`` (daily, through Celery beat).

The tokens of every LLM call, traced or not, are also recorded as ``knowledge.LLMUsage`` rows:
those are what the tenant's daily LLM tokens quota counts (``knowledge.quotas``).
"""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.db.models import Q

from core.models import Tenant
from core.tenancy import TenantScopedQuerySet


class Trace(models.Model):
    """One run of an answer pipeline for a question of a tenant's user.

    ``degraded`` is true when a stage failed and the pipeline went on with a fallback;
    ``error`` then says why. ``config`` is the pipeline's configuration for this run.
    """

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="traces")
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="traces",
    )
    pipeline = models.CharField(max_length=100)
    question = models.TextField()
    answer = models.TextField(blank=True)
    degraded = models.BooleanField(default=False)
    error = models.TextField(blank=True, help_text="Why the run degraded, if it did.")
    total_ms = models.FloatField(default=0.0)
    llm_calls = models.IntegerField(default=0)
    tokens_in = models.IntegerField(default=0)
    tokens_out = models.IntegerField(default=0)
    cost_usd = models.DecimalField(max_digits=12, decimal_places=6, default=0)
    config = models.JSONField(default=dict, blank=True)
    scores = models.JSONField(
        default=dict,
        blank=True,
        help_text="Answer-quality scores (coverage, support, LLM judge) when KB_SCORE_ANSWERS was on; else empty.",
    )
    citations = models.JSONField(
        default=list,
        blank=True,
        help_text='The answer\'s citations: [{"n", "chunk_id", "document_id", "source_id"}], so feedback on [n] '
        "can be credited to its document and source.",
    )
    created_at = models.DateTimeField(auto_now_add=True)

    objects = TenantScopedQuerySet.as_manager()

    class Meta:
        ordering = ["-created_at", "-id"]
        constraints = [
            models.CheckConstraint(condition=Q(total_ms__gte=0), name="trace_total_ms_non_negative"),
            models.CheckConstraint(condition=Q(llm_calls__gte=0), name="trace_llm_calls_non_negative"),
            models.CheckConstraint(condition=Q(tokens_in__gte=0), name="trace_tokens_in_non_negative"),
            models.CheckConstraint(condition=Q(tokens_out__gte=0), name="trace_tokens_out_non_negative"),
            models.CheckConstraint(condition=Q(cost_usd__gte=0), name="trace_cost_usd_non_negative"),
            # The target of the steps' (trace_id, tenant_id) foreign key (migration 0008), which
            # keeps a step in its trace's tenant; a distributed table's key must hold the tenant
            # too (docs/scale.md).
            models.UniqueConstraint(fields=["id", "tenant"], name="trace_unique_id_tenant"),
        ]
        indexes = [
            # The admin changelist: a tenant's traces, newest first.
            models.Index(fields=["tenant", "-created_at"], name="trace_tenant_created_idx"),
            # ``traces_prune``: every tenant's traces older than the retention period.
            models.Index(fields=["created_at"], name="trace_created_idx"),
        ]

    def __str__(self) -> str:
        return f"{self.pipeline}: {self.question[:60]}"


class TraceStep(models.Model):
    """One stage of a traced run: its place in the run, wall time, compact summary and tokens.

    ``tenant`` is the trace's tenant, copied onto the step (set by ``trace_save``; a foreign key
    ``(trace_id, tenant_id)`` to the trace's ``(id, tenant_id)``, migration 0008, refuses any
    other), so row-level security and a distributed database find a step's tenant on its own row
    (``docs/scale.md``).
    """

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="+")
    trace = models.ForeignKey(Trace, on_delete=models.CASCADE, related_name="steps")
    order = models.PositiveIntegerField()
    stage = models.CharField(max_length=100)
    ms = models.FloatField(default=0.0)
    summary = models.JSONField(default=dict, blank=True)
    error = models.TextField(blank=True)
    tokens_in = models.IntegerField(default=0)
    tokens_out = models.IntegerField(default=0)

    objects = TenantScopedQuerySet.as_manager()

    class Meta:
        ordering = ["trace_id", "order"]
        constraints = [
            # Also the index behind ``trace.steps.order_by("order")``.
            models.UniqueConstraint(fields=["trace", "order"], name="tracestep_unique_order_per_trace"),
            models.CheckConstraint(condition=Q(ms__gte=0), name="tracestep_ms_non_negative"),
            models.CheckConstraint(condition=Q(tokens_in__gte=0), name="tracestep_tokens_in_non_negative"),
            models.CheckConstraint(condition=Q(tokens_out__gte=0), name="tracestep_tokens_out_non_negative"),
        ]

    def __str__(self) -> str:
        return f"{self.order}. {self.stage}"


from retrieval.walks.models import Fact, Walk, WalkStep  # noqa: E402  (the walks' models belong to this app)

__all__ = ["Fact", "Trace", "TraceStep", "Walk", "WalkStep"]
