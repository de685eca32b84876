"""Admin: judgment lists (evaluated with the default pipeline by an action) and their generation
by an LLM. Evaluation runs (comparison of two, quality chart per tenant) are in
``quality.admin_runs``; the quality gate's settings changes and the tenants' quality policies in
``quality.admin_gate``: this module imports both, which registers them.

Tenant isolation comes from ``core.admin.TenantScopedAdmin``: superusers see every row, other staff
their own tenant's rows only. The custom views (chart, proposing settings, generating judgments)
take their tenant from ``core.admin.admin_tenant``; superusers pick one with ``?tenant=<slug>``.
"""

from __future__ import annotations

from functools import partial

from django import forms
from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied as DjangoPermissionDenied
from django.db import transaction
from django.http import HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import path, reverse
from django.utils.html import format_html

from core.admin import (
    ReadOnlyAdminMixin,
    TenantScopedAdmin,
    admin_view_tenant,
    tenant_page_context,
)
from core.errors import ApplicationError
from quality import admin_gate, admin_runs  # noqa: F401  (registers the runs' and the gate's admins)
from quality.models import EvaluationRun, Judgment, JudgmentGeneration, JudgmentList
from quality.services.generation import MAX_SAMPLE, judgment_generation_start
from quality.tasks import judgment_list_evaluate_task


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
