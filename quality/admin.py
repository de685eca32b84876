"""Admin: judgment lists (evaluated with the default pipeline by an action), their generation by
an LLM, evaluation runs (comparison of two, quality chart per tenant), the quality gate's settings
changes and the tenants' quality policies.

Tenant isolation comes from ``core.admin.TenantScopedAdmin``: superusers see every row, other staff
their own tenant's rows only. The custom views (chart, proposing settings, generating judgments)
take their tenant from ``core.admin.admin_tenant``; superusers pick one with ``?tenant=<slug>``.
"""

from __future__ import annotations

import json
from functools import partial

from django import forms
from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied as DjangoPermissionDenied
from django.db import transaction
from django.http import HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import path, reverse
from django.utils import timezone
from django.utils.html import format_html, format_html_join

from core.admin import (
    ReadOnlyAdminMixin,
    TenantScopedAdmin,
    admin_view_tenant,
    tenant_page_context,
)
from core.errors import ApplicationError
from quality.charts import line_chart, series_colors
from quality.models import ConfigChange, EvaluationRun, Judgment, JudgmentGeneration, JudgmentList, QualityPolicy
from quality.selectors import evaluation_run_datasets, evaluation_run_series, quality_tolerance
from quality.services import config_change_override, config_change_propose, evaluation_compare
from quality.services.generation import MAX_SAMPLE, judgment_generation_start
from quality.tasks import judgment_list_evaluate_task
from retrieval.config import MODES
from retrieval.pipeline import PIPELINE_NAMES


class JudgmentInline(admin.TabularInline):
    model = Judgment
    extra = 0
    fields = ("query_id", "question", "relevant", "answers")


class EvaluationRunInline(admin.TabularInline):
    """The runs measured on a judgment list, newest first (read-only: runs are measurements)."""

    model = EvaluationRun
    extra = 0
    can_delete = False
    show_change_link = True
    fields = ("pipeline", "mode", "ndcg", "recall", "queries", "created_at")
    readonly_fields = fields
    ordering = ("-created_at",)
    verbose_name_plural = "evaluation runs on this list"

    def has_add_permission(self, request, obj=None):
        return False

    @admin.display(description="nDCG@10")
    def ndcg(self, obj: EvaluationRun):
        return obj.metrics.get("ndcg@10", "")

    @admin.display(description="Recall@10")
    def recall(self, obj: EvaluationRun):
        return obj.metrics.get("recall@10", "")

    @admin.display(description="Queries")
    def queries(self, obj: EvaluationRun):
        return obj.metrics.get("queries", "")


@admin.register(JudgmentList)
class JudgmentListAdmin(TenantScopedAdmin):
    list_display = ("name", "tenant", "origin", "judgment_count", "runs_link", "created_at")
    list_filter = ("origin",)
    search_fields = ("name",)
    inlines = [JudgmentInline, EvaluationRunInline]
    actions = ["evaluate_default_pipeline"]

    @admin.display(description="Judgments")
    def judgment_count(self, obj: JudgmentList) -> int:
        return obj.judgments.count()

    @admin.display(description="Runs")
    def runs_link(self, obj: JudgmentList):
        url = reverse("admin:quality_evaluationrun_changelist") + f"?judgment_list__id__exact={obj.pk}"
        return format_html('<a href="{}">{} runs</a>', url, obj.runs.count())

    @admin.action(description="Evaluate with the default pipeline", permissions=["change"])
    def evaluate_default_pipeline(self, request, queryset):
        """Queue an evaluation run of each selected list with its tenant's default pipeline."""
        lists = list(queryset.order_by("pk"))
        for judgment_list in lists:
            # robust: run eagerly (no broker), a failed evaluation is logged, not a server error
            transaction.on_commit(partial(judgment_list_evaluate_task.delay, judgment_list.pk), robust=True)
        url = reverse("admin:quality_evaluationrun_changelist")
        self.message_user(
            request,
            format_html(
                "Evaluation of {} queued with the default pipeline; the runs appear under "
                '<a href="{}">Evaluation runs</a> when done.',
                ", ".join(jl.name for jl in lists),
                url,
            ),
        )


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


class ProposeSettingsForm(forms.Form):
    config = forms.CharField(
        label="Settings to change (JSON)",
        widget=forms.Textarea(attrs={"rows": 8, "cols": 80, "spellcheck": "false"}),
        help_text=(
            'Keys of the retrieval settings with their new values, e.g. {"pipeline": "expand"} or '
            '{"fusion": "rrf", "rrf_k": 60}. Keys you leave out keep their current value.'
        ),
    )

    def clean_config(self) -> dict:
        try:
            value = json.loads(self.cleaned_data["config"])
        except json.JSONDecodeError as exc:
            raise forms.ValidationError(f"Not valid JSON: {exc}.") from exc
        if not isinstance(value, dict):
            raise forms.ValidationError("Give a JSON object of settings.")
        return value


def deltas_table(deltas: dict):
    """The deltas of a gate evaluation as an HTML table (every value escaped)."""
    if not deltas:
        return "—"
    rows = [
        (list_name, metric, values.get("a"), values.get("b"), values.get("delta"))
        for list_name, metrics in deltas.items()
        for metric, values in metrics.items()
    ]
    body = format_html_join(
        "",
        "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
        rows,
    )
    return format_html(
        "<table><thead><tr><th>Judgment list</th><th>Metric</th><th>Current</th><th>Proposed</th>"
        "<th>Delta</th></tr></thead><tbody>{}</tbody></table>",
        body,
    )


@admin.register(ConfigChange)
class ConfigChangeAdmin(ReadOnlyAdminMixin, TenantScopedAdmin):
    """Changes of retrieval settings through the quality gate: read-only, plus overriding a refusal."""

    change_list_template = "admin/quality/configchange/change_list.html"
    list_display = ("id", "tenant", "status", "progress", "ndcg_delta", "requested_by", "created_at", "finished_at")
    list_filter = ("status",)
    fields = (
        "tenant",
        "status",
        "progress",
        "current_config",
        "proposed_config",
        "tolerance",
        "deltas_shown",
        "runs",
        "error",
        "requested_by",
        "override_by",
        "override_at",
        "created_at",
        "finished_at",
    )
    readonly_fields = fields
    actions = ["override_and_apply"]

    def has_delete_permission(self, request, obj=None):
        return False  # the record of who changed what

    def get_urls(self):
        propose = path("propose/", self.admin_site.admin_view(self.propose_view), name="quality_configchange_propose")
        return [propose, *super().get_urls()]

    @admin.display(description="Progress")
    def progress(self, obj: ConfigChange) -> str:
        return f"{obj.progress_done}/{obj.progress_total}"

    @admin.display(description="Worst nDCG@10 delta")
    def ndcg_delta(self, obj: ConfigChange):
        values = [m["ndcg@10"]["delta"] for m in obj.deltas.values() if "ndcg@10" in m]
        return min(values) if values else ""

    @admin.display(description="Deltas (proposed − current)")
    def deltas_shown(self, obj: ConfigChange):
        return deltas_table(obj.deltas)

    @admin.action(description="Override and apply (refused changes)")
    def override_and_apply(self, request, queryset):
        for change in queryset.order_by("pk"):
            try:
                config_change_override(change_id=change.pk, user=request.user)
            except ApplicationError as exc:
                self.message_user(request, f"Change {change.pk}: {exc.message}", level=messages.ERROR)
            else:
                self.message_user(request, f"Change {change.pk} applied over the refusal; your name is recorded.")

    def propose_view(self, request):
        """Propose new retrieval settings for a tenant; the quality gate decides whether they apply."""
        if not self.has_view_permission(request):
            raise DjangoPermissionDenied
        tenant = admin_view_tenant(request)
        form = ProposeSettingsForm(request.POST or None, initial={"config": "{}"})
        if tenant is not None and request.method == "POST" and form.is_valid():
            try:
                change = config_change_propose(tenant=tenant, user=request.user, proposed=form.cleaned_data["config"])
            except ApplicationError as exc:
                form.add_error("config", exc.message)
            else:
                self.message_user(
                    request,
                    f"Settings change {change.pk}: {change.get_status_display()}.",
                    level=messages.WARNING if change.status in ("refused", "failed") else messages.SUCCESS,
                )
                return HttpResponseRedirect(reverse("admin:quality_configchange_change", args=[change.pk]))
        context = tenant_page_context(
            self,
            request,
            tenant=tenant,
            title="Propose retrieval settings",
            tenant_title=f"Propose retrieval settings for {tenant}",
        )
        context["form"] = form
        if tenant is not None:
            context.update(
                current_config=json.dumps(tenant.retrieval_config or {}, indent=2, sort_keys=True),
                tolerance=quality_tolerance(tenant=tenant),
                pipelines=PIPELINE_NAMES,
            )
        return TemplateResponse(request, "admin/quality/propose.html", context)


@admin.register(QualityPolicy)
class QualityPolicyAdmin(TenantScopedAdmin):
    list_display = ("tenant", "tolerance")


class GenerateJudgmentsForm(forms.Form):
    """A generation request: sample size, optional source (choices: the tenant's ``sources``) and seed."""

    sample = forms.IntegerField(
        min_value=1,
        max_value=MAX_SAMPLE,
        initial=50,
        help_text="Chunks to sample, stratified by source: the LLM writes one question for each.",
    )
    source = forms.ChoiceField(required=False, help_text="Sample only this source's chunks.")
    seed = forms.IntegerField(
        initial=0,
        min_value=-(2**31),
        max_value=2**31 - 1,
        help_text="Fixes the sample: the same sample size, source and seed give back the same list.",
    )

    def __init__(self, *args, sources=(), **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["source"].choices = [("", "All sources"), *((name, name) for name in sources)]


@admin.register(JudgmentGeneration)
class JudgmentGenerationAdmin(ReadOnlyAdminMixin, TenantScopedAdmin):
    """Generations of judgment lists by an LLM: their progress and outcome, and a form to start one."""

    change_list_template = "admin/quality/judgmentgeneration/change_list.html"
    list_display = (
        "id",
        "tenant",
        "source_name",
        "sample",
        "seed",
        "status",
        "progress",
        "rejected",
        "list_link",
        "created_at",
        "finished_at",
    )
    list_filter = ("status",)
    fields = (
        "tenant",
        "source_name",
        "sample",
        "seed",
        "status",
        "progress",
        "rejected",
        "usage",
        "error",
        "list_link",
        "created_at",
        "finished_at",
    )
    readonly_fields = fields

    def get_urls(self):
        generate = path(
            "generate/", self.admin_site.admin_view(self.generate_view), name="quality_judgmentgeneration_generate"
        )
        return [generate, *super().get_urls()]

    @admin.display(description="Progress")
    def progress(self, obj: JudgmentGeneration) -> str:
        return f"{obj.progress_done}/{obj.progress_total}"

    @admin.display(description="Judgment list")
    def list_link(self, obj: JudgmentGeneration):
        if obj.judgment_list_id is None:
            return "—"
        url = reverse("admin:quality_judgmentlist_change", args=[obj.judgment_list_id])
        return format_html('<a href="{}">{}</a>', url, obj.judgment_list)

    def generate_view(self, request):
        """Start generating a judgment list for a tenant (a Celery task; its progress shows here)."""
        if not request.user.has_perm("quality.add_judgmentlist"):
            raise DjangoPermissionDenied
        tenant = admin_view_tenant(request)
        sources = list(tenant.sources.order_by("name").values_list("name", flat=True)) if tenant else []
        form = GenerateJudgmentsForm(request.POST or None, sources=sources)
        if tenant is not None and request.method == "POST" and form.is_valid():
            try:
                generation = judgment_generation_start(
                    tenant=tenant,
                    sample=form.cleaned_data["sample"],
                    seed=form.cleaned_data["seed"],
                    source_name=form.cleaned_data["source"] or None,
                )
            except ApplicationError as exc:
                form.add_error(None, exc.message)
            else:
                failed = generation.status == JudgmentGeneration.Status.FAILED
                self.message_user(
                    request,
                    f"Judgment generation {generation.pk}: {generation.get_status_display().lower()}"
                    + (f" ({generation.error})" if failed else "."),
                    level=messages.WARNING if failed else messages.SUCCESS,
                )
                return HttpResponseRedirect(reverse("admin:quality_judgmentgeneration_change", args=[generation.pk]))
        context = tenant_page_context(
            self,
            request,
            tenant=tenant,
            title="Generate a judgment list",
            tenant_title=f"Generate a judgment list for {tenant}",
        )
        context["form"] = form
        return TemplateResponse(request, "admin/quality/generate_judgments.html", context)
