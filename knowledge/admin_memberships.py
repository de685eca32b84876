"""Admin for a user's memberships (one per tenant) and their membership API tokens.

The user page gets a Memberships inline, so a superuser edits every tenant a user belongs to in
one place; a tenant admin (who would need ``auth`` permissions to reach it at all) sees only
users of their tenant and only their tenant's memberships. Membership tokens are listed and
revoked here; they are made with ``manage.py membershiptoken`` (the key is shown once).
"""

from __future__ import annotations

from django.contrib import admin
from django.contrib.auth import get_user_model
from django.contrib.auth.admin import UserAdmin

from core.admin import UNSCOPED, TenantScopedAdmin, admin_tenant
from knowledge.models import Membership, Tenant
from knowledge.tokens import MembershipToken


class MembershipInline(admin.TabularInline):
    model = Membership
    fk_name = "user"
    fields = ["tenant", "role"]
    extra = 0

    def get_queryset(self, request):
        queryset = super().get_queryset(request).select_related("tenant")
        tenant = admin_tenant(request)
        if tenant is UNSCOPED:
            return queryset
        return queryset.for_tenant(tenant) if tenant is not None else queryset.none()

    def formfield_for_foreignkey(self, db_field, request, **kwargs):
        tenant = admin_tenant(request)
        if db_field.name == "tenant" and tenant is not UNSCOPED:
            kwargs["queryset"] = Tenant.objects.filter(pk=getattr(tenant, "pk", None))
        return super().formfield_for_foreignkey(db_field, request, **kwargs)


class UserWithMembershipsAdmin(UserAdmin):
    inlines = [*UserAdmin.inlines, MembershipInline]

    def get_queryset(self, request):
        queryset = super().get_queryset(request)
        tenant = admin_tenant(request)
        if tenant is UNSCOPED:
            return queryset
        return queryset.filter(memberships__tenant=tenant) if tenant is not None else queryset.none()


User = get_user_model()
if admin.site.is_registered(User):
    admin.site.unregister(User)
admin.site.register(User, UserWithMembershipsAdmin)


@admin.register(MembershipToken)
class MembershipTokenAdmin(TenantScopedAdmin):
    list_display = ["prefix", "name", "membership", "created_at", "last_used_at"]
    list_select_related = ["membership__user", "membership__tenant"]
    search_fields = ["name", "prefix", "membership__user__username"]
    readonly_fields = ["membership", "prefix", "created_at", "last_used_at"]

    def has_add_permission(self, request):
        return False
