"""Traces of answer-pipeline runs: what each stage did, how long it took and what it cost.

A ``Trace`` is written once, after the answer (``retrieval.tracing.trace_save``), with one
``TraceStep`` per stage in run order. It keeps its own copy of the question, the answer and the
pipeline's configuration, so it can be read without re-running anything. Old traces are removed
by ``retrieval.tracing.traces_prune`` (daily, through Celery beat).
"""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.db.models import Q

from core.models import Tenant
from core.tenancy import TenantScopedQuerySet
from knowledge.models import Document, Source


class TraceStepQuerySet(TenantScopedQuerySet):
    tenant_path = "trace__tenant"


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
    """One stage of a traced run: its place in the run, wall time, compact summary and tokens."""

    trace = models.ForeignKey(Trace, on_delete=models.CASCADE, related_name="steps")
    order = models.PositiveIntegerField()
    stage = models.CharField(max_length=100)
    ms = models.FloatField(default=0.0)
    summary = models.JSONField(default=dict, blank=True)
    error = models.TextField(blank=True)
    tokens_in = models.IntegerField(default=0)
    tokens_out = models.IntegerField(default=0)

    objects = TraceStepQuerySet.as_manager()

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


class Feedback(models.Model):
    """A user's thumbs up or down, with an optional comment, on an answer or on one of its citations.

    ``citation`` is the answer's ``[n]`` the feedback is about, or ``None`` for the whole answer;
    ``document`` and ``source`` are the cited passage's (kept for per-source figures, emptied if
    they are deleted). One feedback per user, trace and citation: giving it again replaces it.
    Written by ``retrieval.feedback.feedback_give``.
    """

    class Rating(models.IntegerChoices):
        UP = 1, "Helpful"
        DOWN = -1, "Not helpful"

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="feedback")
    trace = models.ForeignKey(Trace, on_delete=models.CASCADE, related_name="feedback")
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="feedback"
    )
    citation = models.PositiveSmallIntegerField(
        null=True, blank=True, help_text="[n] of the answer; empty: the answer."
    )
    document = models.ForeignKey(Document, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    source = models.ForeignKey(Source, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    rating = models.SmallIntegerField(choices=Rating.choices)
    comment = models.TextField(blank=True, max_length=2000)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    objects = TenantScopedQuerySet.as_manager()

    class Meta:
        ordering = ["-created_at", "-id"]
        constraints = [
            models.CheckConstraint(condition=Q(rating__in=[1, -1]), name="feedback_rating_up_or_down"),
            models.CheckConstraint(
                condition=Q(citation__isnull=True) | Q(citation__gte=1), name="feedback_citation_positive"
            ),
            # One feedback per user on an answer, and one per user on each of its citations.
            models.UniqueConstraint(
                fields=["trace", "user"],
                condition=Q(citation__isnull=True, user__isnull=False),
                name="feedback_one_per_user_answer",
            ),
            models.UniqueConstraint(
                fields=["trace", "user", "citation"],
                condition=Q(citation__isnull=False, user__isnull=False),
                name="feedback_one_per_user_citation",
            ),
        ]
        indexes = [
            # The admin changelist and the trends page: a tenant's feedback, newest first.
            models.Index(fields=["tenant", "-created_at"], name="feedback_tenant_created_idx"),
        ]

    def __str__(self) -> str:
        target = f"[{self.citation}]" if self.citation else "answer"
        return f"{self.get_rating_display()} on {target} of trace {self.trace_id}"


class ConversationQuerySet(TenantScopedQuerySet):
    def for_user(self, tenant, user):
        """The conversations ``user`` had in ``tenant`` (a user sees only their own)."""
        return self.for_tenant(tenant).filter(user=user)


class Conversation(models.Model):
    """A user's thread of questions: each follow-up is answered in the light of the turns before it.

    ``title`` is the first question, cut to 200 characters. Written by
    ``retrieval.conversations.conversation_ask``.
    """

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="conversations")
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="conversations")
    title = models.CharField(max_length=200)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    objects = ConversationQuerySet.as_manager()

    class Meta:
        ordering = ["-updated_at", "-id"]
        indexes = [
            # The portal's and the API's list: a user's conversations, most recent first.
            models.Index(fields=["tenant", "user", "-updated_at"], name="conversation_user_recent_idx"),
        ]

    def __str__(self) -> str:
        return self.title


class TurnQuerySet(TenantScopedQuerySet):
    tenant_path = "conversation__tenant"


class Turn(models.Model):
    """One question of a conversation and its answer: the user's history.

    ``query`` is the standalone search query the follow-up was condensed into (equal to the
    question for a first turn or a standalone one); ``citations`` the answer's
    ``[{"n", "document_id", "title", "version", "chunk"}]``; ``trace`` the run's trace while it
    is kept (traces are pruned after ``KB_TRACE_RETENTION_DAYS``; the turn stays).
    """

    conversation = models.ForeignKey(Conversation, on_delete=models.CASCADE, related_name="turns")
    order = models.PositiveIntegerField()
    question = models.TextField()
    query = models.TextField(blank=True)
    answer = models.TextField(blank=True)
    citations = models.JSONField(default=list, blank=True)
    pipeline = models.CharField(max_length=100)
    trace = models.ForeignKey(Trace, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    created_at = models.DateTimeField(auto_now_add=True)

    objects = TurnQuerySet.as_manager()

    class Meta:
        ordering = ["conversation_id", "order"]
        constraints = [
            # Also the index behind ``conversation.turns.order_by("order")``.
            models.UniqueConstraint(fields=["conversation", "order"], name="turn_unique_order_per_conversation"),
            models.CheckConstraint(condition=Q(order__gte=1), name="turn_order_from_one"),
        ]

    def __str__(self) -> str:
        return f"{self.order}. {self.question[:60]}"


class CitationOpen(models.Model):
    """A user opened citation ``[citation]`` of an answer (the trace): the history personalization reads.

    Recorded by ``retrieval.history.citation_open`` when the portal's citation link (or the API)
    is followed. ``document`` and ``source`` are the cited passage's, as for ``Feedback``. One row
    per user, trace and citation; ``opens`` counts the openings and ``opened_at`` is the latest.
    """

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="citation_opens")
    trace = models.ForeignKey(Trace, on_delete=models.CASCADE, related_name="citation_opens")
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="citation_opens")
    citation = models.PositiveSmallIntegerField(help_text="[n] of the answer.")
    document = models.ForeignKey(Document, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    source = models.ForeignKey(Source, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    opens = models.PositiveIntegerField(default=1)
    opened_at = models.DateTimeField(auto_now=True)

    objects = TenantScopedQuerySet.as_manager()

    class Meta:
        ordering = ["-opened_at", "-id"]
        constraints = [
            models.CheckConstraint(condition=Q(citation__gte=1), name="citationopen_citation_positive"),
            models.CheckConstraint(condition=Q(opens__gte=1), name="citationopen_opens_positive"),
            models.UniqueConstraint(fields=["trace", "user", "citation"], name="citationopen_one_per_user_citation"),
        ]
        indexes = [
            # ``personal_signals_get``: the documents a tenant's users (one, or a team) opened.
            models.Index(fields=["tenant", "user"], name="citationopen_tenant_user_idx"),
        ]

    def __str__(self) -> str:
        return f"[{self.citation}] of trace {self.trace_id} opened {self.opens}x"
