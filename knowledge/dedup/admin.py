"""Admin of near-duplicates: clusters (with their members), members and pairs, tenant-scoped.

Found by ``knowledge.dedup.services.near_duplicates_refresh``, never added by hand. Editing is
by actions, which mark pairs "not a duplicate" so the edit survives later recomputation:
split members off their cluster, take a member out of its cluster, or mark pairs not duplicates
(and undo that). Registered by ``knowledge.admin``.
"""

from __future__ import annotations

from collections import defaultdict

from django.contrib import admin, messages
from django.db.models import Count
from django.urls import reverse
from django.utils.html import format_html

from core.admin import TenantScopedAdmin
from core.errors import ApplicationError
from knowledge.dedup.services import (
    near_duplicate_cluster_split,
    near_duplicate_members_detach,
    near_duplicate_pairs_reject,
    near_duplicate_pairs_restore,
)
from knowledge.models.dedup import NearDuplicateCluster, NearDuplicateMember, NearDuplicatePair


def _by_tenant(queryset):
    groups = defaultdict(list)
    for row in queryset.select_related("tenant"):
        groups[row.tenant].append(row.pk)
    return groups.items()


class _NoAddMixin:
    def has_add_permission(self, request, obj=None):
        return False


class MemberInline(_NoAddMixin, admin.TabularInline):
    model = NearDuplicateMember
    fields = ["version", "source", "published_at", "ingested_at"]
    readonly_fields = fields
    extra = 0
    can_delete = False

    def get_queryset(self, request):
        return super().get_queryset(request).select_related("version__document__source")

    @admin.display(description="source")
    def source(self, obj):
        return obj.version.document.source.name

    @admin.display(description="published")
    def published_at(self, obj):
        return obj.version.published_at

    @admin.display(description="ingested")
    def ingested_at(self, obj):
        return obj.version.ingested_at


@admin.register(NearDuplicateCluster)
class NearDuplicateClusterAdmin(_NoAddMixin, TenantScopedAdmin):
    list_display = ["__str__", "tenant", "member_count", "titles", "updated_at"]
    list_filter = ["tenant"]
    search_fields = ["members__version__document__title", "members__version__document__external_id"]
    fields = ["tenant", "edit_members", "created_at", "updated_at"]
    readonly_fields = fields
    inlines = [MemberInline]

    def get_queryset(self, request):
        return super().get_queryset(request).annotate(member_count=Count("members")).select_related("tenant")

    @admin.display(description="members", ordering="member_count")
    def member_count(self, obj):
        return obj.member_count

    @admin.display(description="documents")
    def titles(self, obj):
        names = obj.members.values_list("version__document__source__name", "version__document__external_id")[:4]
        return ", ".join(f"{source}/{external_id}" for source, external_id in names)

    @admin.display(description="edit")
    def edit_members(self, obj):
        url = reverse("admin:knowledge_nearduplicatemember_changelist")
        return format_html('<a href="{}?cluster__id__exact={}">Split or take out members</a>', url, obj.pk)


@admin.register(NearDuplicateMember)
class NearDuplicateMemberAdmin(_NoAddMixin, TenantScopedAdmin):
    list_display = ["version", "source", "cluster", "published_at"]
    list_filter = ["tenant", "cluster"]
    list_select_related = ["version__document__source", "cluster"]
    search_fields = ["version__document__title", "version__document__external_id"]
    fields = ["tenant", "cluster", "version"]
    readonly_fields = fields
    actions = ["split_off", "detach"]

    def has_change_permission(self, request, obj=None):
        return obj is None and super().has_change_permission(request)  # actions only

    @admin.display(description="source")
    def source(self, obj):
        return obj.version.document.source.name

    @admin.display(description="published")
    def published_at(self, obj):
        return obj.version.published_at

    @admin.action(description="Split the selected members off into a cluster of their own", permissions=["change"])
    def split_off(self, request, queryset):
        for tenant, ids in _by_tenant(queryset):
            try:
                changed = near_duplicate_cluster_split(tenant=tenant, member_ids=ids)
            except ApplicationError as exc:
                self.message_user(request, exc.message, messages.ERROR)
            else:
                self.message_user(request, f"Split off {len(ids)} member(s); {changed} pair(s) marked not duplicates.")

    @admin.action(description="Mark the selected members not duplicates of their cluster", permissions=["change"])
    def detach(self, request, queryset):
        for tenant, ids in _by_tenant(queryset):
            changed = near_duplicate_members_detach(tenant=tenant, member_ids=ids)
            self.message_user(request, f"Took {len(ids)} member(s) out; {changed} pair(s) marked not duplicates.")


@admin.register(NearDuplicatePair)
class NearDuplicatePairAdmin(_NoAddMixin, TenantScopedAdmin):
    list_display = ["__str__", "jaccard", "kind", "update", "status"]
    list_filter = ["tenant", "status", "kind"]
    list_select_related = ["older__document", "newer__document"]
    search_fields = ["older__document__external_id", "newer__document__external_id", "update"]
    fields = ["tenant", "older", "newer", "jaccard", "kind", "update", "status", "created_at"]
    readonly_fields = fields
    actions = ["reject", "restore"]

    def has_change_permission(self, request, obj=None):
        return obj is None and super().has_change_permission(request)  # actions only

    @admin.action(description="Mark the selected pairs not duplicates", permissions=["change"])
    def reject(self, request, queryset):
        for tenant, ids in _by_tenant(queryset):
            changed = near_duplicate_pairs_reject(tenant=tenant, pair_ids=ids)
            self.message_user(request, f"{changed} pair(s) marked not duplicates; clusters rebuilt.")

    @admin.action(description="Mark the selected pairs near-duplicates again", permissions=["change"])
    def restore(self, request, queryset):
        for tenant, ids in _by_tenant(queryset):
            changed = near_duplicate_pairs_restore(tenant=tenant, pair_ids=ids)
            self.message_user(request, f"{changed} pair(s) marked near-duplicates; clusters rebuilt.")
