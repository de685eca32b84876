"""A walk, its path and its facts (imported by ``retrieval.models``; migration ``0009_walks``).

``Walk``: one WalkingRAG run, from the question to the answer, steered or not; the asker and the
question are private to the asker. ``WalkStep``: one query of one round (the path). ``Fact``: one
fact the walk extracted, tied to the chunk and version it came from (memory). A fact is live while
its chunk is current and nobody marked it wrong; the trigger ``fact_retire_with_version``
(migration) retires it (``superseded``) when its chunk stops being current and brings it back if
that version becomes current again; a deleted chunk takes its facts with it.
"""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.db.models import Q
from pgvector.django import VectorField

from core.models import Tenant
from core.tenancy import TenantScopedQuerySet

WALK_STATUSES = ("running", "paused", "done", "failed", "stopped")
# Why a fact is retired: a person marked it wrong, or its version stopped being current.
RETIRED_REASONS = ("", "wrong", "superseded")


class Walk(models.Model):
    """One WalkingRAG walk: status, the round it is in, the queries it will search next, the answer.

    ``status``: ``running``, ``paused`` (waiting for a person: ``pause_after`` rounds ran, or a
    person asked), ``done`` (answered), ``failed`` (the run raised), ``stopped`` (a person stopped
    it; it answered from what it had). ``next_queries`` are the queries of the next round, a
    person may edit them while paused. ``answer``: ``{"text", "citations": [...], "degraded"}``.
    ``user`` (the asker) and ``question`` are shown only to the asker. ``worker_id`` and
    ``lease_expires_at``: the process running a steered walk holds a lease on it while it runs or
    waits paused; one that stops (killed, restarted) leaves the lease to run out, and the walk is
    taken over and resumed from its last round (``retrieval.walks.steering.walks_recover``).
    """

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="+")
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    question = models.TextField()
    pipeline = models.CharField(max_length=100, default="walkingrag")
    status = models.CharField(max_length=10, default="running")
    steered = models.BooleanField(default=False, help_text="Started through the walks API or portal.")
    pause_after = models.PositiveIntegerField(null=True, blank=True, help_text="Pause after this round.")
    k = models.PositiveSmallIntegerField(default=5, help_text="Chunks read per query per round.")
    pause_requested = models.BooleanField(default=False)
    stop_requested = models.BooleanField(default=False)
    round = models.PositiveIntegerField(default=0)
    next_queries = models.JSONField(default=list, blank=True)
    stop_reason = models.CharField(max_length=30, blank=True)
    answer = models.JSONField(default=dict, blank=True)
    error = models.TextField(blank=True)
    # The lease of the process running the walk (``knowledge.services.leases``): renewed while it
    # runs or waits paused; a walk whose lease ran out lost its process and is taken over.
    worker_id = models.CharField(max_length=200, blank=True, help_text="The process running the walk.")
    lease_expires_at = models.DateTimeField(null=True, blank=True)
    trace = models.ForeignKey("retrieval.Trace", null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)
    paused_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    objects = TenantScopedQuerySet.as_manager()

    class Meta:
        ordering = ["-created_at", "-id"]
        constraints = [
            models.CheckConstraint(condition=Q(status__in=WALK_STATUSES), name="walk_status_known"),
            models.UniqueConstraint(fields=["id", "tenant"], name="walk_unique_id_tenant"),
        ]
        indexes = [models.Index(fields=["tenant", "-created_at"], name="walk_tenant_created_idx")]

    def __str__(self) -> str:
        return f"Walk {self.pk} ({self.status}, round {self.round})"

    @property
    def finished(self) -> bool:
        return self.status in ("done", "failed", "stopped")


class WalkStep(models.Model):
    """One query of one round of a walk: where it came from, what it found, whether it led anywhere.

    ``origin``: ``question`` (round 1), ``facts`` (named by the LLM after the facts of the
    previous round; ``led_by`` holds those facts' ids) or ``person`` (added while paused).
    ``chunk_ids``: the chunks it found that the walk had not read (reading order). ``fact_count``:
    facts extracted from those chunks. ``false_start``: it found nothing new, or nothing it found
    yielded a fact.
    """

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="+")
    walk = models.ForeignKey(Walk, on_delete=models.CASCADE, related_name="steps")
    round = models.PositiveIntegerField()
    query = models.TextField()
    origin = models.CharField(max_length=10, default="question")
    led_by = models.JSONField(default=list, blank=True)
    chunk_ids = models.JSONField(default=list, blank=True)
    fact_count = models.PositiveIntegerField(default=0)
    false_start = models.BooleanField(default=False)
    created_at = models.DateTimeField(auto_now_add=True)

    objects = TenantScopedQuerySet.as_manager()

    class Meta:
        ordering = ["walk_id", "round", "id"]
        constraints = [
            models.CheckConstraint(condition=Q(round__gte=1), name="walkstep_round_positive"),
            models.CheckConstraint(
                condition=Q(origin__in=("question", "facts", "person")), name="walkstep_origin_known"
            ),
        ]

    def __str__(self) -> str:
        return f"Round {self.round}: {self.query[:60]}"


class Fact(models.Model):
    """A fact a walk extracted, kept as memory with its provenance.

    ``text`` is the fact (a person may correct it: ``corrected``), ``relevance`` why the walk
    kept it, ``next_sources`` where the walk looked next after that round. ``chunk`` and
    ``version`` say where it came from; ``walk``, ``trace`` and ``round`` which walk found it.
    ``entities``: the chunk's named entities the fact names (LLM-free). ``embedding``: the fact's
    embedding with its tenant's embedder (``embedder``), searched by the memory retriever.
    ``retired_reason``: ``wrong`` (a person) or ``superseded`` (its version is no longer current;
    kept so that ``as_of`` searches still find it).
    """

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="+")
    walk = models.ForeignKey(Walk, null=True, blank=True, on_delete=models.SET_NULL, related_name="facts")
    trace = models.ForeignKey("retrieval.Trace", null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    # Foreign keys with ON DELETE CASCADE are created by the migration: a chunk deleted by
    # retention or a re-ingestion takes its facts with it, whatever deletes it.
    chunk = models.ForeignKey("knowledge.Chunk", on_delete=models.DO_NOTHING, db_constraint=False, related_name="facts")
    version = models.ForeignKey(
        "knowledge.DocumentVersion", on_delete=models.DO_NOTHING, db_constraint=False, related_name="+"
    )
    round = models.PositiveIntegerField(default=1)
    text = models.TextField()
    relevance = models.TextField(blank=True)
    next_sources = models.JSONField(default=list, blank=True)
    entities = models.JSONField(default=list, blank=True)
    embedder = models.CharField(max_length=200, blank=True)
    embedding = VectorField(null=True, blank=True)
    corrected = models.BooleanField(default=False, help_text="A person edited the text.")
    retired_reason = models.CharField(max_length=10, blank=True, default="")
    retired_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    objects = TenantScopedQuerySet.as_manager()

    class Meta:
        ordering = ["-created_at", "-id"]
        constraints = [
            models.CheckConstraint(condition=Q(retired_reason__in=RETIRED_REASONS), name="fact_retired_reason_known"),
            models.CheckConstraint(
                condition=Q(retired_reason="") | Q(retired_at__isnull=False), name="fact_retired_has_time"
            ),
            models.CheckConstraint(condition=~Q(text=""), name="fact_text_not_empty"),
        ]
        indexes = [
            models.Index(fields=["tenant", "-created_at"], name="fact_tenant_created_idx"),
            models.Index(fields=["chunk"], name="fact_chunk_idx"),
            models.Index(fields=["walk"], name="fact_walk_idx"),
        ]

    def __str__(self) -> str:
        return self.text[:80]

    @property
    def live(self) -> bool:
        return not self.retired_reason
