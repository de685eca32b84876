"""Admin of the facts walks kept: list, correct and retire them, and see where walks go.

Tenant admins see their tenant's facts (``TenantScopedAdmin``) with their chunk, document, version
and walk number, never the asker or the question. "Mark wrong" retires a fact (memory never serves
it again) and "Restore" takes that back; editing a fact's text corrects it (re-embedded). The
"Walk paths" page (``paths/``, ``?document=<id>`` for one document) shows the chunks walks most
often end on, the commonest false starts and the facts found there (``walk_paths_summary``).
"""

from __future__ import annotations

from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied
from django.template.response import TemplateResponse
from django.urls import path

from core.admin import UNSCOPED, TenantScopedAdmin, admin_tenant
from knowledge.models import Chunk, Document
from retrieval.walks.memory import fact_correct, fact_restore, fact_retire
from retrieval.walks.models import Fact
from retrieval.walks.selectors import walk_paths_summary


@admin.register(Fact)
class FactAdmin(TenantScopedAdmin):
    list_display = ("text_short", "document_title", "version_number", "round", "walk_id", "state", "created_at")
    list_filter = ("retired_reason", "corrected", "tenant")
    search_fields = ("text",)
    fields = (
        "text",
        "relevance",
        "entities",
        "chunk_id",
        "document_title",
        "version_number",
        "walk_id",
        "round",
        "trace_id",
        "corrected",
        "retired_reason",
        "retired_at",
        "created_at",
    )
    readonly_fields = tuple(f for f in fields if f != "text")
    actions = ("mark_wrong", "restore")
    change_list_template = "admin/retrieval/fact/change_list.html"

    def get_queryset(self, request):
        return super().get_queryset(request).select_related("version__document")

    @admin.display(description="fact")
    def text_short(self, obj: Fact) -> str:
        return obj.text[:100]

    @admin.display(description="document")
    def document_title(self, obj: Fact) -> str:
        return obj.version.document.title

    @admin.display(description="version")
    def version_number(self, obj: Fact) -> int:
        return obj.version.number

    @admin.display(description="state")
    def state(self, obj: Fact) -> str:
        return {"": "live", "wrong": "marked wrong", "superseded": "superseded"}[obj.retired_reason]

    def has_add_permission(self, request):
        return False  # facts come from walks

    def save_model(self, request, obj, form, change):
        if "text" in form.changed_data:
            text = obj.text
            obj.refresh_from_db(fields=["text"])
            fact_correct(fact=obj, text=text)

    @admin.action(description="Mark wrong (memory stops using them)")
    def mark_wrong(self, request, queryset):
        for fact in queryset.exclude(retired_reason="wrong"):
            fact_retire(fact=fact)
        messages.success(request, "Marked wrong.")

    @admin.action(description="Restore facts marked wrong")
    def restore(self, request, queryset):
        for fact in queryset.filter(retired_reason="wrong"):
            fact_restore(fact=fact)
        messages.success(request, "Restored.")

    def get_urls(self):
        return [
            path("paths/", self.admin_site.admin_view(self.paths_view), name="retrieval_fact_paths"),
            *super().get_urls(),
        ]

    def paths_view(self, request):
        """Where walks go, in the tenant (or one ``?document=``)."""
        if not self.has_view_permission(request):
            raise PermissionDenied
        tenant = admin_tenant(request)
        if tenant is UNSCOPED:
            tenant_id = request.GET.get("tenant")
            tenant_id = int(tenant_id) if tenant_id and tenant_id.isdigit() else None
        else:
            tenant_id = tenant.pk if tenant is not None else None
        document = None
        summary = None
        if tenant_id is not None:
            document_id = request.GET.get("document")
            if document_id and document_id.isdigit():
                document = Document.objects.for_tenant(tenant_id).filter(pk=int(document_id)).first()
            summary = walk_paths_summary(tenant_id=tenant_id, document_id=document.pk if document else None)
            chunks = {
                c.pk: c
                for c in Chunk.objects.for_tenant(tenant_id)
                .filter(pk__in=[chunk_id for chunk_id, _n in summary["ends"]])
                .select_related("version__document")
            }
            summary["ends"] = [(chunks.get(chunk_id), n) for chunk_id, n in summary["ends"]]
        context = {
            **self.admin_site.each_context(request),
            "title": f"Walk paths{': ' + document.title if document else ''}",
            "opts": self.model._meta,
            "summary": summary,
            "document": document,
            "tenant_id": tenant_id,
        }
        return TemplateResponse(request, "admin/retrieval/fact/paths.html", context)
