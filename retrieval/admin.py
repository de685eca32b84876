"""Admin of answer traces: read-only, each trace's steps shown in run order.

Traces are written by ``retrieval.tracing.trace_save`` only, so the admin never adds or changes
them. Tenant isolation comes from ``core.admin.TenantScopedAdmin``; a tenant admin needs the
``retrieval.view_trace`` permission (the steps inline follows the trace's permission).
"""

from __future__ import annotations

import json

from django.contrib import admin
from django.core.exceptions import PermissionDenied as DjangoPermissionDenied
from django.db.models import Exists, OuterRef, Q
from django.template.response import TemplateResponse
from django.urls import path, reverse
from django.utils.html import format_html
from django.utils.text import Truncator

from core.admin import TenantScopedAdmin, admin_view_tenant, tenant_page_context
from retrieval.feedback import feedback_trends
from retrieval.models import Feedback, Trace, TraceStep


def _pretty_json(value) -> str:
    return format_html('<pre style="margin: 0; white-space: pre-wrap">{}</pre>', json.dumps(value, indent=2))


class HasErrorFilter(admin.SimpleListFilter):
    """Traces whose run degraded or had a stage report an error."""

    title = "has error"
    parameter_name = "has_error"

    def lookups(self, request, model_admin):
        return (("yes", "Yes"), ("no", "No"))

    def queryset(self, request, queryset):
        failed = (
            Q(degraded=True) | ~Q(error="") | Exists(TraceStep.objects.filter(trace=OuterRef("pk")).exclude(error=""))
        )
        if self.value() == "yes":
            return queryset.filter(failed)
        if self.value() == "no":
            return queryset.exclude(failed)
        return queryset


class TraceStepInline(admin.TabularInline):
    model = TraceStep
    extra = 0
    can_delete = False
    ordering = ("order",)
    fields = ("order", "stage", "ms", "error", "tokens_in", "tokens_out", "summary_pretty")
    readonly_fields = fields

    @admin.display(description="summary")
    def summary_pretty(self, obj: TraceStep) -> str:
        return _pretty_json(obj.summary)

    def _may_view_trace(self, request) -> bool:
        opts = Trace._meta
        return request.user.has_perm(f"{opts.app_label}.view_{opts.model_name}") or request.user.has_perm(
            f"{opts.app_label}.change_{opts.model_name}"
        )

    def has_view_permission(self, request, obj=None):
        return self._may_view_trace(request)

    def has_add_permission(self, request, obj=None):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False


@admin.register(Trace)
class TraceAdmin(TenantScopedAdmin):
    list_display = (
        "created_at",
        "pipeline",
        "user",
        "short_question",
        "total_ms",
        "degraded",
        "llm_calls",
        "cost_usd",
        "coverage",
    )
    list_filter = (
        ("tenant", admin.RelatedOnlyFieldListFilter),
        "pipeline",
        ("user", admin.RelatedOnlyFieldListFilter),
        "created_at",
        "degraded",
        HasErrorFilter,
    )
    list_select_related = ("user",)
    search_fields = ("question",)
    fields = (
        "created_at",
        "tenant",
        "user",
        "pipeline",
        "question",
        "answer",
        "degraded",
        "error",
        "total_ms",
        "llm_calls",
        "tokens_in",
        "tokens_out",
        "cost_usd",
        "scores_pretty",
        "config_pretty",
    )
    readonly_fields = fields
    inlines = [TraceStepInline]

    @admin.display(description="question", ordering="question")
    def short_question(self, obj: Trace) -> str:
        return Truncator(obj.question).chars(80)

    @admin.display(description="config")
    def config_pretty(self, obj: Trace) -> str:
        return _pretty_json(obj.config)

    @admin.display(description="scores")
    def scores_pretty(self, obj: Trace) -> str:
        return _pretty_json(obj.scores) if obj.scores else "–"

    @admin.display(description="coverage", ordering="scores__coverage")
    def coverage(self, obj: Trace) -> str:
        """The share of the answer's sentences that cite a passage, when the answer was scored."""
        value = (obj.scores or {}).get("coverage")
        return f"{value:.0%}" if isinstance(value, (int, float)) else "–"

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False


@admin.register(Feedback)
class FeedbackAdmin(TenantScopedAdmin):
    """Users' thumbs up/down on answers and citations: read-only (users give it in the portal or
    the API), deletable, with a page of the negative share per pipeline and per source by week."""

    list_display = ("created_at", "rating", "target", "pipeline", "source", "user", "short_comment", "trace_link")
    list_filter = (
        ("tenant", admin.RelatedOnlyFieldListFilter),
        "rating",
        "trace__pipeline",
        ("source", admin.RelatedOnlyFieldListFilter),
        ("user", admin.RelatedOnlyFieldListFilter),
        "created_at",
    )
    list_select_related = ("trace", "source", "user")
    search_fields = ("comment", "trace__question")
    fields = (
        "created_at",
        "updated_at",
        "tenant",
        "user",
        "trace_link",
        "citation",
        "document",
        "source",
        "rating",
        "comment",
    )
    readonly_fields = fields

    @admin.display(description="on")
    def target(self, obj: Feedback) -> str:
        return f"[{obj.citation}]" if obj.citation else "answer"

    @admin.display(description="pipeline", ordering="trace__pipeline")
    def pipeline(self, obj: Feedback) -> str:
        return obj.trace.pipeline

    @admin.display(description="comment")
    def short_comment(self, obj: Feedback) -> str:
        return Truncator(obj.comment).chars(80) or "–"

    @admin.display(description="trace")
    def trace_link(self, obj: Feedback):
        url = reverse("admin:retrieval_trace_change", args=[obj.trace_id])
        return format_html('<a href="{}">#{} {}</a>', url, obj.trace_id, Truncator(obj.trace.question).chars(60))

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def get_urls(self):
        trends = path("trends/", self.admin_site.admin_view(self.trends_view), name="retrieval_feedback_trends")
        return [trends, *super().get_urls()]

    def trends_view(self, request):
        """The share of negative feedback per pipeline and per source, week by week."""
        if not self.has_view_permission(request):
            raise DjangoPermissionDenied
        tenant = admin_view_tenant(request)
        context = tenant_page_context(
            self, request, tenant=tenant, title="Feedback trends", tenant_title=f"Feedback trends of {tenant}"
        )
        if tenant is not None:
            context["tables"] = [
                ("Per pipeline (answers and citations)", feedback_trends(tenant=tenant, by="pipeline")),
                ("Per source (citations)", feedback_trends(tenant=tenant, by="source")),
            ]
        return TemplateResponse(request, "admin/retrieval/feedback_trends.html", context)
