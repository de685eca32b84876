"""Admin of answer traces: read-only, each trace's steps shown in run order.

Traces are written by ``retrieval.traces.trace_save`` only, so the admin never adds or changes
them. Tenant isolation comes from ``core.admin.TenantScopedAdmin``; a tenant admin needs the
``retrieval.view_trace`` permission (the steps inline follows the trace's permission).
"""

from __future__ import annotations

import json

from django.contrib import admin
from django.db.models import Exists, OuterRef, Q
from django.utils.html import format_html
from django.utils.text import Truncator

from core.admin import TenantScopedAdmin
from retrieval.models import Trace, TraceStep
from retrieval.walks import admin as walks_admin  # noqa: F401  (registers the facts' admin)


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
