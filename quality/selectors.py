"""Reads of the quality app, each scoped to one tenant through ``for_tenant``."""

from __future__ import annotations

from core.errors import NotFound
from core.models import Tenant
from quality.models import ConfigChange, EvaluationRun, JudgmentList, QualityPolicy

DEFAULT_TOLERANCE = 0.005


def config_change_get(*, tenant: Tenant, change_id: int) -> ConfigChange:
    """One of the tenant's retrieval-settings changes; ``NotFound`` otherwise (also for another tenant's)."""
    change = ConfigChange.objects.for_tenant(tenant).filter(pk=change_id).first()
    if change is None:
        raise NotFound(f"Settings change {change_id} not found.")
    return change


def quality_tolerance(*, tenant: Tenant) -> float:
    """How far a judgment list's mean nDCG@10 may drop before the gate refuses a change."""
    policy = QualityPolicy.objects.for_tenant(tenant).first()
    return policy.tolerance if policy else DEFAULT_TOLERANCE


def judgment_lists_to_gate(*, tenant: Tenant) -> list[JudgmentList]:
    """The tenant's judgment lists that hold at least one judgment, by name."""
    return list(JudgmentList.objects.for_tenant(tenant).filter(judgments__isnull=False).distinct().order_by("name"))


def evaluation_run_series(
    *, tenant: Tenant, dataset: str | None = None, mode: str | None = None
) -> dict[str, list[EvaluationRun]]:
    """The tenant's evaluation runs, oldest first, grouped by pipeline (pipelines sorted by name).

    ``dataset`` and ``mode`` narrow the runs to one dataset or retrieval mode.
    """
    runs = EvaluationRun.objects.for_tenant(tenant).defer("per_query").order_by("created_at", "pk")
    if dataset:
        runs = runs.filter(dataset=dataset)
    if mode:
        runs = runs.filter(mode=mode)
    series: dict[str, list[EvaluationRun]] = {}
    for run in runs:
        series.setdefault(run.pipeline, []).append(run)
    return dict(sorted(series.items()))


def evaluation_run_datasets(*, tenant: Tenant) -> list[str]:
    """The datasets the tenant's evaluation runs were measured on, sorted."""
    return sorted(set(EvaluationRun.objects.for_tenant(tenant).values_list("dataset", flat=True)))
