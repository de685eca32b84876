"""Judgment lists (questions with their known relevant documents or chunks) and evaluation runs.

A run keeps its own copy of everything needed to read it later (dataset name, configuration,
metrics and per-query results), so it survives the removal of the tenant and judgment list it
was measured on: both foreign keys are ``SET_NULL``.
"""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.db.models import Q

from core.tenancy import TenantScopedQuerySet
from knowledge.models import Tenant


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
    """One measurement of retrieval quality: a judgment list run through a retrieval pipeline.

    ``pipeline`` names the pipeline (``retrieval.pipeline.PIPELINE_NAMES``); ``config`` is its
    full configuration (``PipelineSpec.as_config()``, search settings included) plus the mode,
    splitter, embedder and k; ``metrics`` the means over queries, latency percentiles of the whole
    pipeline and LLM usage totals; ``per_query`` a list of ``{"query_id", "question", "metrics":
    {...}, "latency_ms", "timings_ms": {...}, "usage": {...}, "degraded", "top": [ids of the top
    10]}``.
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
    pipeline = models.CharField(max_length=50, default="simple")
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
        return f"{self.dataset} {self.pipeline}/{self.mode} #{self.pk}"


class QualityPolicy(models.Model):
    """A tenant's quality gate settings: how far mean nDCG@10 may drop before a change is refused."""

    tenant = models.OneToOneField(Tenant, on_delete=models.CASCADE, related_name="quality_policy")
    tolerance = models.FloatField(
        default=0.005,
        help_text="Largest allowed drop of a judgment list's mean nDCG@10 (absolute, e.g. 0.005).",
    )

    objects = TenantScopedQuerySet.as_manager()

    class Meta:
        verbose_name_plural = "quality policies"
        constraints = [
            models.CheckConstraint(condition=Q(tolerance__gte=0), name="qualitypolicy_tolerance_not_negative"),
        ]

    def __str__(self) -> str:
        return f"{self.tenant}: tolerance {self.tolerance}"


class ConfigChange(models.Model):
    """A proposed change of ``Tenant.retrieval_config`` and the quality gate's verdict on it.

    ``proposed_config`` holds the keys to change; they are merged into the configuration in force
    (``new_config``). With judgment lists, each list is run with ``current_config``
    and with the result of the change; ``deltas`` is ``{list name: {metric: {"a", "b", "delta"}}}``
    (a = current, b = proposed) and ``runs`` ``{list name: {"current": run id, "proposed": run
    id}}``. The change is *accepted* (and applied) unless some list's mean nDCG@10 falls by more
    than ``tolerance``; then it is *refused* until an admin overrides it. Without judgment lists
    it is *applied* at once.
    """

    class Status(models.TextChoices):
        PENDING = "pending", "Pending"
        EVALUATING = "evaluating", "Evaluating"
        ACCEPTED = "accepted", "Accepted and applied"
        REFUSED = "refused", "Refused"
        OVERRIDDEN = "overridden", "Overridden and applied"
        APPLIED = "applied", "Applied (nothing to evaluate)"
        FAILED = "failed", "Failed"

    OPEN = (Status.PENDING, Status.EVALUATING)

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="config_changes")
    requested_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    current_config = models.JSONField(default=dict, blank=True)
    proposed_config = models.JSONField(default=dict, blank=True)
    status = models.CharField(max_length=12, choices=Status.choices, default=Status.PENDING)
    progress_done = models.PositiveIntegerField(default=0)
    progress_total = models.PositiveIntegerField(default=0)
    deltas = models.JSONField(default=dict, blank=True)
    runs = models.JSONField(default=dict, blank=True)
    tolerance = models.FloatField(default=0.005)
    error = models.TextField(blank=True)
    override_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    override_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    objects = TenantScopedQuerySet.as_manager()

    class Meta:
        constraints = [
            models.CheckConstraint(
                condition=Q(
                    status__in=["pending", "evaluating", "accepted", "refused", "overridden", "applied", "failed"]
                ),
                name="configchange_status_known",
            ),
            models.CheckConstraint(condition=Q(tolerance__gte=0), name="configchange_tolerance_not_negative"),
            models.CheckConstraint(
                condition=Q(progress_done__lte=models.F("progress_total")),
                name="configchange_progress_within_total",
            ),
            # The gate compares against the configuration in force: one open change at a time.
            models.UniqueConstraint(
                fields=["tenant"],
                condition=Q(status__in=["pending", "evaluating"]),
                name="configchange_one_open_per_tenant",
            ),
        ]
        indexes = [
            # Admin and API list a tenant's changes, newest first.
            models.Index(fields=["tenant", "-created_at"], name="cfgchange_tenant_created_idx"),
        ]

    def __str__(self) -> str:
        return f"{self.tenant} change #{self.pk} ({self.status})"

    @property
    def new_config(self) -> dict:
        """The retrieval configuration this change leads to: ``current_config`` with the change merged in."""
        return config_merge(self.current_config, self.proposed_config)


def config_merge(current: dict, proposed: dict) -> dict:
    """``current`` with ``proposed``'s keys set (the keys it does not name keep their value)."""
    return {**(current or {}), **(proposed or {})}
