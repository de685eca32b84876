"""Judgment lists (questions with their known relevant documents or chunks) and evaluation runs.

A run keeps its own copy of everything needed to read it later (dataset name, configuration,
metrics and per-query results), so it survives the removal of the tenant and judgment list it
was measured on: both foreign keys are ``SET_NULL``.
"""

from __future__ import annotations

from django.db import models
from django.db.models import Q

from knowledge.models import Tenant, TenantScopedQuerySet


class JudgmentListQuerySet(TenantScopedQuerySet):
    tenant_path = "tenant"


class JudgmentQuerySet(TenantScopedQuerySet):
    tenant_path = "judgment_list__tenant"


class JudgmentList(models.Model):
    """A named set of judged questions of a tenant, imported from a dataset or written by hand."""

    class Origin(models.TextChoices):
        BIOASQ = "bioasq", "BioASQ"
        HOTPOTQA = "hotpotqa", "HotpotQA"
        RAG4P = "rag4p", "RAG4p"
        BEIR = "beir", "BEIR"
        MANUAL = "manual", "Manual"

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="judgment_lists")
    name = models.CharField(max_length=200)
    origin = models.CharField(max_length=20, choices=Origin.choices, default=Origin.MANUAL)
    created_at = models.DateTimeField(auto_now_add=True)

    objects = JudgmentListQuerySet.as_manager()

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["tenant", "name"], name="judgmentlist_unique_name_per_tenant"),
            models.CheckConstraint(
                condition=Q(origin__in=["bioasq", "hotpotqa", "rag4p", "beir", "manual"]),
                name="judgmentlist_origin_known",
            ),
            models.CheckConstraint(condition=~Q(name=""), name="judgmentlist_name_not_empty"),
        ]

    def __str__(self) -> str:
        return f"{self.tenant}/{self.name}"


class Judgment(models.Model):
    """A question and what should be retrieved for it.

    ``relevant`` is a list of ``{"document": external_id, "grade": int}`` (document-level, graded)
    or ``{"document": external_id, "text": str, "grade": int}`` (chunk-level: a retrieved chunk is
    relevant when it contains ``text``).
    """

    judgment_list = models.ForeignKey(JudgmentList, on_delete=models.CASCADE, related_name="judgments")
    query_id = models.CharField(max_length=200)
    question = models.TextField()
    relevant = models.JSONField(default=list)

    objects = JudgmentQuerySet.as_manager()

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["judgment_list", "query_id"],
                name="judgment_unique_query_per_list",
            ),
            models.CheckConstraint(condition=~Q(question=""), name="judgment_question_not_empty"),
        ]

    def __str__(self) -> str:
        return f"{self.query_id}: {self.question[:60]}"


class EvaluationRunQuerySet(TenantScopedQuerySet):
    tenant_path = "tenant"


class EvaluationRun(models.Model):
    """One measurement of retrieval quality: a judgment list run through ``chunk_search``.

    ``config`` is the ``SearchConfig`` used (``dataclasses.asdict``) plus the splitter and
    embedder; ``metrics`` the means over queries and latency percentiles; ``per_query`` a list of
    ``{"query_id", "question", "metrics": {...}, "latency_ms", "timings_ms": {...}, "top": [ids of
    the top 10]}``.
    """

    judgment_list = models.ForeignKey(
        JudgmentList,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="runs",
    )
    tenant = models.ForeignKey(
        Tenant,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="evaluation_runs",
    )
    dataset = models.CharField(max_length=200)
    mode = models.CharField(max_length=10)
    config = models.JSONField(default=dict, blank=True)
    metrics = models.JSONField(default=dict, blank=True)
    per_query = models.JSONField(default=list, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    objects = EvaluationRunQuerySet.as_manager()

    class Meta:
        constraints = [
            models.CheckConstraint(
                condition=Q(mode__in=["hybrid", "lexical", "dense"]),
                name="evaluationrun_mode_known",
            ),
        ]
        indexes = [
            # Admin and reports list a dataset's runs, newest first, to compare them.
            models.Index(fields=["dataset", "-created_at"], name="evalrun_dataset_created_idx"),
            # Tenant-scoped run lists (non-superuser staff in the admin).
            models.Index(fields=["tenant", "-created_at"], name="evalrun_tenant_created_idx"),
        ]

    def __str__(self) -> str:
        return f"{self.dataset} {self.mode} #{self.pk}"
