"""Admin of member profiles and of users' feedback on answers, limited to the tenant admin's own
tenant (``core.admin``)."""

from django.contrib import admin
from django.core.exceptions import PermissionDenied as DjangoPermissionDenied
from django.template.response import TemplateResponse
from django.urls import path, reverse
from django.utils.html import format_html
from django.utils.text import Truncator

from core.admin import TenantScopedAdmin, admin_view_tenant, tenant_page_context
from people.feedback import feedback_trends
from people.models import Feedback, Profile


@admin.register(Profile)
class ProfileAdmin(TenantScopedAdmin):
    list_display = ("membership", "title", "team", "expertise", "language", "updated_at")
    list_filter = ("expertise", "language")
    search_fields = ("membership__user__username", "title", "team")
    list_select_related = ("membership__user", "membership__tenant")
    filter_horizontal = ("preferred_sources", "muted_sources")
    readonly_fields = ("membership", "updated_at")

    def has_add_permission(self, request):
        return False  # a profile is made with its member's first visit


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
        trends = path("trends/", self.admin_site.admin_view(self.trends_view), name="people_feedback_trends")
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
        return TemplateResponse(request, "admin/people/feedback_trends.html", context)
