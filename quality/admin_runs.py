"""Admin of evaluation runs: the runs (read-only measurements), a comparison of two, and the
quality chart of a tenant's runs over time (``/admin/quality/evaluationrun/chart/``)."""

from __future__ import annotations

import json

from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied as DjangoPermissionDenied
from django.template.response import TemplateResponse
from django.urls import path
from django.utils import timezone

from core.admin import TenantScopedAdmin, admin_view_tenant, tenant_page_context
from quality.charts import line_chart, series_colors
from quality.models import EvaluationRun
from quality.selectors import evaluation_run_datasets, evaluation_run_series
from quality.services import evaluation_compare
from retrieval.config import MODES


def _metric(name: str):
    @admin.display(description=name)
    def show(self, obj: EvaluationRun):
        return obj.metrics.get(name, "")

    return show


CHARTS = (
    # (metric, title, y axis maximum, value format)
    ("ndcg@10", "nDCG@10", 1.0, lambda v: f"{v:.3f}"),
    ("recall@10", "Recall@10", 1.0, lambda v: f"{v:.3f}"),
    ("p50_ms", "Median latency (ms)", None, lambda v: f"{v:.1f}"),
)
# Drawn, and given a column in the runs table, only when a shown run has the metric (runs
# measured with --answers on a list with gold answers).
ANSWER_CHARTS = (
    ("answer_token_f1", "Answer token F1 (gold answers)", 1.0, lambda v: f"{v:.3f}"),
    ("answer_gold_in_answer", "Gold answer in the answer", 1.0, lambda v: f"{v:.3f}"),
    ("answer_yesno_accuracy", "Yes/no accuracy (gold answers)", 1.0, lambda v: f"{v:.3f}"),
    ("answer_rouge_l", "ROUGE-L against the ideal answer", 1.0, lambda v: f"{v:.3f}"),
    ("answer_seconds_mean", "Seconds per answer (mean)", None, lambda v: f"{v:.2f}"),
)
TABLE_COLUMNS = (("ndcg@10", "nDCG@10"), ("recall@10", "Recall@10"), ("p50_ms", "p50 ms"), ("llm_calls", "LLM calls"))


@admin.register(EvaluationRun)
class EvaluationRunAdmin(TenantScopedAdmin):
    """Evaluation runs (read-only measurements), the "Compare two runs" action and the chart page."""

    change_list_template = "admin/quality/evaluationrun/change_list.html"
    list_display = (
        "id",
        "dataset",
        "pipeline",
        "mode",
        "ndcg_at_10",
        "recall_at_10",
        "recall_at_100",
        "mrr_at_10",
        "hit_at_1",
        "p50_ms",
        "p95_ms",
        "llm_calls",
        "queries",
        "created_at",
    )
    list_filter = ("dataset", "pipeline", "mode")
    readonly_fields = (
        "judgment_list",
        "tenant",
        "dataset",
        "pipeline",
        "mode",
        "config",
        "metrics",
        "per_query",
        "created_at",
    )
    actions = ["compare_runs"]

    ndcg_at_10 = _metric("ndcg@10")
    recall_at_10 = _metric("recall@10")
    recall_at_100 = _metric("recall@100")
    mrr_at_10 = _metric("mrr@10")
    hit_at_1 = _metric("hit@1")
    p50_ms = _metric("p50_ms")
    p95_ms = _metric("p95_ms")
    llm_calls = _metric("llm_calls")
    queries = _metric("queries")

    def has_add_permission(self, request):
        return False  # runs are measurements: made by `manage.py evaluate` or the services

    def get_urls(self):
        chart = path("chart/", self.admin_site.admin_view(self.chart_view), name="quality_evaluationrun_chart")
        return [chart, *super().get_urls()]

    @admin.action(description="Compare two runs")
    def compare_runs(self, request, queryset):
        runs = list(queryset.order_by("created_at", "pk"))
        if len(runs) != 2:
            self.message_user(request, "Select exactly two runs to compare.", level=messages.WARNING)
            return None
        run_a, run_b = runs
        context = {
            **self.admin_site.each_context(request),
            "opts": self.model._meta,
            "title": f"Run {run_a.pk} vs run {run_b.pk}",
            "run_a": run_a,
            "run_b": run_b,
            "comparison": evaluation_compare(run_a=run_a, run_b=run_b),
            "config_a": json.dumps(run_a.config, indent=2, sort_keys=True),
            "config_b": json.dumps(run_b.config, indent=2, sort_keys=True),
        }
        return TemplateResponse(request, "admin/quality/compare.html", context)

    def chart_view(self, request):
        """nDCG@10, recall@10 and median latency of a tenant's runs over time, a line per pipeline,
        and the answer metrics (``ANSWER_CHARTS``) that some of the runs have."""
        if not self.has_view_permission(request):
            raise DjangoPermissionDenied
        tenant = admin_view_tenant(request)
        context = tenant_page_context(
            self, request, tenant=tenant, title="Retrieval quality", tenant_title=f"Retrieval quality of {tenant}"
        )
        if tenant is None:  # a superuser who has not picked a tenant yet
            return TemplateResponse(request, "admin/quality/chart.html", context)
        dataset = request.GET.get("dataset") or None
        mode = request.GET.get("mode") if request.GET.get("mode") in MODES else None
        series = evaluation_run_series(tenant=tenant, dataset=dataset, mode=mode)
        colors = series_colors(list(series))
        runs = sorted((run for runs in series.values() for run in runs), key=lambda r: (r.created_at, r.pk))
        answer_charts = [
            spec for spec in ANSWER_CHARTS if any(isinstance(run.metrics.get(spec[0]), (int, float)) for run in runs)
        ]
        charts = [
            line_chart(
                title=title,
                metric=metric,
                series={
                    name: [
                        (timezone.localtime(run.created_at), float(run.metrics[metric]), run.pk)
                        for run in runs
                        if isinstance(run.metrics.get(metric), (int, float))
                    ]
                    for name, runs in series.items()
                },
                colors=colors,
                y_max=y_max,
                y_format=fmt,
            )
            for metric, title, y_max, fmt in (*CHARTS, *answer_charts)
        ]
        columns = [*TABLE_COLUMNS, *((metric, title) for metric, title, _, _ in answer_charts)]
        context.update(
            charts=charts,
            legend=list(colors.items()),
            columns=[title for _, title in columns],
            runs=[
                {"run": run, "values": [run.metrics.get(metric, "") for metric, _ in columns]} for run in reversed(runs)
            ],
            datasets=evaluation_run_datasets(tenant=tenant),
            modes=MODES,
            dataset=dataset or "",
            mode=mode or "",
        )
        return TemplateResponse(request, "admin/quality/chart.html", context)
