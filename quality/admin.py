"""Admin: judgment lists with their judgments, evaluation runs and a side-by-side comparison.

Superusers see every row; other staff see only their tenant's rows (``tenant_for_user``), and
none when they belong to no tenant.
"""

from django.contrib import admin, messages
from django.template.response import TemplateResponse

from knowledge.errors import PermissionDenied
from knowledge.models import Tenant
from knowledge.selectors import tenant_for_user
from quality.models import EvaluationRun, Judgment, JudgmentList
from quality.services import evaluation_compare


def _user_tenant(request) -> Tenant | None:
    try:
        return tenant_for_user(request.user)
    except PermissionDenied:
        return None


class TenantScopedAdmin(admin.ModelAdmin):
    """Limits rows (and tenant choices) to the signed-in staff member's tenant."""

    def get_queryset(self, request):
        queryset = super().get_queryset(request)
        if request.user.is_superuser:
            return queryset
        tenant = _user_tenant(request)
        return queryset.for_tenant(tenant) if tenant else queryset.none()

    def formfield_for_foreignkey(self, db_field, request, **kwargs):
        if db_field.name == "tenant" and not request.user.is_superuser:
            tenant = _user_tenant(request)
            kwargs["queryset"] = Tenant.objects.filter(pk=tenant.pk if tenant else None)
        return super().formfield_for_foreignkey(db_field, request, **kwargs)


class JudgmentInline(admin.TabularInline):
    model = Judgment
    extra = 0
    fields = ("query_id", "question", "relevant")


@admin.register(JudgmentList)
class JudgmentListAdmin(TenantScopedAdmin):
    list_display = ("name", "tenant", "origin", "judgment_count", "created_at")
    list_filter = ("origin",)
    search_fields = ("name",)
    inlines = [JudgmentInline]

    @admin.display(description="Judgments")
    def judgment_count(self, obj: JudgmentList) -> int:
        return obj.judgments.count()


def _metric(name: str):
    @admin.display(description=name)
    def show(self, obj: EvaluationRun):
        return obj.metrics.get(name, "")

    return show


@admin.register(EvaluationRun)
class EvaluationRunAdmin(TenantScopedAdmin):
    list_display = (
        "id",
        "dataset",
        "mode",
        "ndcg_at_10",
        "recall_at_10",
        "recall_at_100",
        "mrr_at_10",
        "hit_at_1",
        "p95_ms",
        "queries",
        "created_at",
    )
    list_filter = ("dataset", "mode")
    readonly_fields = (
        "judgment_list",
        "tenant",
        "dataset",
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
    p95_ms = _metric("p95_ms")
    queries = _metric("queries")

    def has_add_permission(self, request):
        return False  # runs are measurements: made by `manage.py evaluate` or the services

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
        }
        return TemplateResponse(request, "admin/quality/compare.html", context)
