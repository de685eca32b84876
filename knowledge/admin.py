"""Django admin for curating the knowledge base, isolated by tenant.

Tenant isolation (superusers see every tenant, tenant admins their own) lives in one place,
``core.admin.TenantScopedAdmin``, which goes through the models' ``for_tenant`` managers.

Like any staff user, a tenant admin sees only the models they hold Django permissions for:
grant the ``knowledge`` app's model permissions (view/change/delete on Document, Source; view on
DocumentVersion, Chunk, IngestionJob, SyncRun) and the ``core`` app's (view/change on Membership, Tenant)
to the tenant admins' users or group. The demo setup grants them. Tenants and memberships are
administered in ``core.admin``.

Documents, versions and chunks are written by ingestion, so the admin never adds them: versions
are read-only except their publication date, chunks are read-only (embeddings never appear in a
form), and deleting documents goes through ``knowledge.services.document_delete``. Sources and
their sync runs are in ``knowledge.admin_sources``.
"""

from __future__ import annotations

from django.contrib import admin, messages
from django.core.exceptions import ValidationError
from django.db.models import Count
from django.urls import reverse
from django.utils.html import format_html, format_html_join

from core.admin import AuditedAdminMixin, ReadOnlyAdminMixin, TenantScopedAdmin, TenantScopedForm
from core.audit import audit_shown
from core.errors import ApplicationError
from core.models import Membership
from knowledge import admin_sources  # noqa: F401  (registers the source and sync run admins)
from knowledge.access import access_rule_check
from knowledge.models import (
    AccessGroup,
    AccessRule,
    Chunk,
    ChunkEnrichment,
    Document,
    DocumentVersion,
    IngestionJob,
)
from knowledge.quotas import admin as _quotas_admin  # noqa: F401  (registers the tenants' quota admin, superusers only)
from knowledge.services.deletion import document_delete

# --- Sources and documents ---------------------------------------------------------------------

# Sources, their form by kind, "Sync now" and sync runs: knowledge.admin_sources, which registers
# them when this module imports it (top).


class DeletedAtSourceFilter(admin.SimpleListFilter):
    """Documents a sync found gone from their source (``deleted_at`` set), or the live ones."""

    title = "at its source"
    parameter_name = "at_source"

    def lookups(self, request, model_admin):
        return [("live", "Live"), ("deleted", "Deleted at its source")]

    def queryset(self, request, queryset):
        if self.value() == "live":
            return queryset.filter(deleted_at__isnull=True)
        if self.value() == "deleted":
            return queryset.filter(deleted_at__isnull=False)
        return queryset


class VersionInline(admin.TabularInline):
    model = DocumentVersion
    fk_name = "document"
    fields = ["number", "is_current", "chunk_count", "content_hash", "duplicate_of", "published_at", "ingested_at"]
    readonly_fields = fields
    ordering = ["-number"]
    extra = 0
    show_change_link = True
    can_delete = False

    def get_queryset(self, request):
        return (
            super().get_queryset(request).select_related("duplicate_of__document").annotate(chunk_count=Count("chunks"))
        )

    def has_add_permission(self, request, obj=None):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    @admin.display(description="chunks")
    def chunk_count(self, obj):
        return obj.chunk_count


@admin.register(Document)
class DocumentAdmin(TenantScopedAdmin):
    list_display = ["title", "external_id", "source", "tenant", "version_count", "updated_at", "deleted_at"]
    list_filter = ["tenant", ("source", admin.RelatedOnlyFieldListFilter), DeletedAtSourceFilter]
    list_select_related = ["source", "tenant"]
    search_fields = ["title", "external_id", "uri"]
    date_hierarchy = "updated_at"
    fields = [
        "tenant",
        "source",
        "external_id",
        "title",
        "uri",
        "metadata",
        "portal_link",
        "sync_key",
        "deleted_at",
        "created_at",
        "updated_at",
    ]
    readonly_fields = ["tenant", "external_id", "portal_link", "sync_key", "deleted_at", "created_at", "updated_at"]
    inlines = [VersionInline]

    def get_queryset(self, request):
        return super().get_queryset(request).annotate(version_count=Count("versions"))

    def has_add_permission(self, request):
        return False  # documents come from ingestion

    def get_actions(self, request):
        actions = super().get_actions(request)
        if "delete_selected" in actions:
            func, name, _ = actions["delete_selected"]
            actions[name] = (func, name, "Delete selected documents with their versions and chunks")
        return actions

    def delete_model(self, request, obj):
        self._delete(request, [obj])

    def delete_queryset(self, request, queryset):
        self._delete(request, queryset.select_related("tenant"))

    def _delete(self, request, documents):
        """Delete through the service, which re-indexes documents that duplicated these."""
        for document in documents:
            try:
                document_delete(tenant=document.tenant, document_id=document.pk)
            except ApplicationError as exc:
                self.message_user(request, f"{document}: {exc.message}", messages.ERROR)

    def get_deleted_objects(self, objs, request):
        # Deleting a document deletes its versions and chunks as one unit (no separate
        # permission needed for them); list only the documents, not every chunk.
        _, model_count, _, protected = super().get_deleted_objects(objs, request)
        return [str(obj) for obj in objs], model_count, set(), protected

    @admin.display(description="versions", ordering="version_count")
    def version_count(self, obj):
        return obj.version_count

    @admin.display(description="portal")
    def portal_link(self, obj):
        if obj.pk is None:
            return "-"
        url = reverse("portal:document", args=[obj.pk])
        return format_html('<a href="{}">Open in the portal</a>', url)


@admin.register(DocumentVersion)
class DocumentVersionAdmin(TenantScopedAdmin):
    list_display = ["__str__", "number", "is_current", "duplicate_of", "published_at", "ingested_at"]
    list_filter = [
        ("document__tenant", admin.RelatedOnlyFieldListFilter),
        ("document__source", admin.RelatedOnlyFieldListFilter),
        "is_current",
    ]
    list_select_related = ["document", "duplicate_of__document"]
    search_fields = ["document__title", "document__external_id", "content_hash", "text"]
    date_hierarchy = "ingested_at"
    fields = ["document", "number", "is_current", "duplicate_of", "content_hash", "published_at", "ingested_at", "text"]
    readonly_fields = ["document", "number", "is_current", "duplicate_of", "content_hash", "ingested_at", "text"]

    def has_add_permission(self, request):
        return False

    def has_delete_permission(self, request, obj=None):
        return False  # the current version and its chunks go with the document


@admin.register(Chunk)
class ChunkAdmin(ReadOnlyAdminMixin, TenantScopedAdmin):
    list_display = ["__str__", "kind", "ordinal", "heading", "token_count", "embedder", "tenant"]
    list_filter = [
        "tenant",
        ("version__document__source", admin.RelatedOnlyFieldListFilter),
        "kind",
        "embedder",
    ]
    list_select_related = ["version__document", "tenant"]
    search_fields = ["text", "heading", "version__document__title", "version__document__external_id"]
    exclude = ["embedding"]
    readonly_fields = [
        "portal_link",
        "enrichment_keyphrases",
        "enrichment_questions",
        "enrichment_entities",
        "enrichment_method",
    ]

    def has_delete_permission(self, request, obj=None):
        return False  # chunks are rebuilt by ingestion, never edited by hand

    # Enrichment (knowledge.enrichment, docs/enrichment.md): what the chunk's extra BM25 field holds.

    @staticmethod
    def _enrichment(obj):
        return ChunkEnrichment.objects.filter(chunk_id=obj.pk).first() if obj and obj.pk else None

    @admin.display(description="keyphrases")
    def enrichment_keyphrases(self, obj):
        enrichment = self._enrichment(obj)
        return "; ".join(enrichment.keyphrases) if enrichment else "(not enriched)"

    @admin.display(description="questions")
    def enrichment_questions(self, obj):
        enrichment = self._enrichment(obj)
        if enrichment is None:
            return "(not enriched)"
        if enrichment.questions_error:
            return f"(none: {enrichment.questions_error})"
        return format_html_join("", "<div>{}</div>", ((q,) for q in enrichment.questions)) or "(none)"

    @admin.display(description="entities")
    def enrichment_entities(self, obj):
        enrichment = self._enrichment(obj)
        if enrichment is None:
            return "(not enriched)"
        if enrichment.entities_error:
            return f"(none: {enrichment.entities_error})"
        return "; ".join(enrichment.entities) or "(none)"

    @admin.display(description="enrichment")
    def enrichment_method(self, obj):
        enrichment = self._enrichment(obj)
        return (
            f"{enrichment.method}, {enrichment.term_count} lexemes, {enrichment.created_at:%Y-%m-%d %H:%M}"
            if enrichment
            else "-"
        )

    @admin.display(description="portal")
    def portal_link(self, obj):
        url = reverse("portal:document", args=[obj.version.document_id])
        return format_html(
            '<a href="{}?version={}#chunk-{}">Open in the portal</a>', url, obj.version.number, obj.ordinal
        )


@admin.register(IngestionJob)
class IngestionJobAdmin(ReadOnlyAdminMixin, TenantScopedAdmin):
    list_display = ["file_name", "tenant", "source", "status", "attempts", "worker_id", "created_at", "finished_at"]
    list_filter = ["tenant", ("source", admin.RelatedOnlyFieldListFilter), "status"]
    list_select_related = ["tenant", "source"]
    search_fields = ["file_name", "error"]
    date_hierarchy = "created_at"


# Near-duplicate clusters, members and pairs (knowledge.dedup).
from knowledge.dedup import admin as _dedup_admin  # noqa: E402, F401

# --- Groups and access rules (knowledge.access) -------------------------------------------------


class AccessGroupForm(TenantScopedForm):
    def clean(self):
        cleaned = super().clean()
        tenant = cleaned.get("tenant") or getattr(self.instance, "tenant", None)
        if tenant is not None and cleaned.get("members") is not None:
            strangers = [u for u in cleaned["members"] if not Membership.objects.filter(tenant=tenant, user=u).exists()]
            if strangers:
                self.add_error("members", f"Not members of {tenant}: {', '.join(map(str, strangers))}.")
        return cleaned


@admin.register(AccessGroup)
class AccessGroupAdmin(AuditedAdminMixin, TenantScopedAdmin):
    """A tenant admin's groups: named sets of the tenant's members, granted restricted sources and
    documents. Additions, changes (name, members) and deletions are recorded in the audit log."""

    form = AccessGroupForm
    audit_actions = {
        "created": "access_group.created",
        "changed": "access_group.changed",
        "deleted": "access_group.deleted",
    }
    list_display = ["name", "tenant", "member_count", "created_at"]
    list_filter = ["tenant"]
    list_select_related = ["tenant"]
    search_fields = ["name"]
    filter_horizontal = ["members"]

    def get_queryset(self, request):
        return super().get_queryset(request).annotate(member_count=Count("members"))

    @admin.display(description="members", ordering="member_count")
    def member_count(self, obj):
        return obj.member_count

    def audit_deleted(self, obj):
        return {"name": [obj.name, None], "members": [audit_shown(obj.members.all()), None], "rules": obj.rules.count()}


class AccessRuleForm(TenantScopedForm):
    def clean(self):
        cleaned = super().clean()
        tenant = cleaned.get("tenant") or getattr(self.instance, "tenant", None)
        if tenant is not None and not self.errors:
            try:
                access_rule_check(tenant=tenant, **{k: cleaned.get(k) for k in ("source", "document", "group", "user")})
            except ApplicationError as exc:
                raise ValidationError(exc.message) from exc
        return cleaned


@admin.register(AccessRule)
class AccessRuleAdmin(AuditedAdminMixin, TenantScopedAdmin):
    """Who may see a restricted source or document. Without a rule, a source or document is public
    to its tenant; changes apply to the next query. Additions, changes and deletions are recorded
    in the audit log."""

    form = AccessRuleForm
    audit_actions = {
        "created": "access_rule.created",
        "changed": "access_rule.changed",
        "deleted": "access_rule.deleted",
    }
    list_display = ["__str__", "tenant", "source", "document", "group", "user", "created_at"]
    list_filter = ["tenant", ("source", admin.RelatedOnlyFieldListFilter), ("group", admin.RelatedOnlyFieldListFilter)]
    list_select_related = ["tenant", "source", "document", "group", "user"]
    search_fields = ["document__title", "source__name", "group__name", "user__username"]

    def audit_deleted(self, obj):
        return {
            name: [audit_shown(getattr(obj, name)), None]
            for name in ("source", "document", "group", "user")
            if getattr(obj, f"{name}_id") is not None
        }
