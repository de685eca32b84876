"""The admin of tenancy itself: tenants, memberships (also inline on the user page), membership
tokens, users' API tokens and the audit log.

The building blocks every app's ``admin.py`` imports from here live in ``core.admin_scoping``
(tenant isolation: ``TenantScopedAdmin``, ``admin_tenant``, ...) and ``core.admin_audit``
(``AuditedAdminMixin``: additions, changes and deletions of the audited models are recorded in the
audit log, ``core.audit``).
"""

from __future__ import annotations

from django.contrib import admin
from django.contrib.auth import get_user_model
from django.contrib.auth.admin import UserAdmin
from django.db.models import Count
from rest_framework.authtoken.admin import TokenAdmin
from rest_framework.authtoken.models import TokenProxy

from core.admin_audit import AuditedAdminMixin, audit_form_changes
from core.admin_scoping import (
    UNSCOPED,
    ReadOnlyAdminMixin,
    SuperuserOnlyAdminMixin,
    TenantScopedAdmin,
    TenantScopedForm,
    admin_superuser,
    admin_tenant,
    admin_view_tenant,
    tenant_page_context,
)
from core.audit import audit_record
from core.memberships import membership_list
from core.models import AuditEvent, Membership, MembershipToken, Tenant
from core.rls import rls_bypass

__all__ = [
    "UNSCOPED",
    "AuditedAdminMixin",
    "ReadOnlyAdminMixin",
    "SuperuserOnlyAdminMixin",
    "TenantScopedAdmin",
    "TenantScopedForm",
    "admin_superuser",
    "admin_tenant",
    "admin_view_tenant",
    "audit_form_changes",
    "tenant_page_context",
]


# --- Tenants, members and their tokens ---------------------------------------------------------


@admin.register(Tenant)
class TenantAdmin(admin.ModelAdmin):
    list_display = ["slug", "name", "embedder", "member_count", "document_count", "created_at"]
    search_fields = ["slug", "name"]
    date_hierarchy = "created_at"

    def get_queryset(self, request):
        queryset = (
            super()
            .get_queryset(request)
            .annotate(
                member_count=Count("memberships", distinct=True),
                document_count=Count("documents", distinct=True),  # the knowledge app's documents
            )
        )
        tenant = admin_tenant(request)
        if tenant is UNSCOPED:
            return queryset
        return queryset.filter(pk=tenant.pk) if tenant is not None else queryset.none()

    def get_readonly_fields(self, request, obj=None):
        # Retrieval settings change through the quality gate (quality's "Propose retrieval
        # settings"), which first evaluates them on the tenant's judgment lists and refuses bad
        # values; a new tenant starts with the defaults, so the add form cannot store a bad value either.
        gated = ["retrieval_config"]
        if admin_superuser(request):
            return ["created_at", *gated]
        # Changing the embedder needs a re-embed of every chunk: a superuser's job.
        return ["slug", "embedder", "created_at", *gated]

    def has_add_permission(self, request):
        return admin_superuser(request) and super().has_add_permission(request)

    def has_delete_permission(self, request, obj=None):
        return admin_superuser(request) and super().has_delete_permission(request, obj)

    @admin.display(description="members", ordering="member_count")
    def member_count(self, obj):
        return obj.member_count

    @admin.display(description="documents", ordering="document_count")
    def document_count(self, obj):
        return obj.document_count


def _membership_action(verb: str, changes: dict) -> str:
    if verb == "changed":
        return "membership.role_changed" if "role" in changes else "membership.changed"
    return {"created": "membership.created", "deleted": "membership.removed"}[verb]


def _membership_removed(membership: Membership) -> dict:
    return {"role": [membership.role, None], "tokens_revoked": membership.tokens.count()}


@admin.register(Membership)
class MembershipAdmin(AuditedAdminMixin, TenantScopedAdmin):
    list_display = ["user", "tenant", "role"]
    list_filter = ["tenant", "role"]
    list_select_related = ["user", "tenant"]
    search_fields = ["user__username", "user__email", "tenant__slug"]

    def audit_action(self, verb, obj, changes):
        return _membership_action(verb, changes)

    def audit_deleted(self, obj):
        return _membership_removed(obj)


# The user page gets a Memberships inline, so a superuser edits every tenant a user belongs to in
# one place; a tenant admin (who would need ``auth`` permissions to reach it at all) sees only
# users of their tenant and only their tenant's memberships. Membership tokens are listed and
# revoked here; they are made with ``manage.py membershiptoken`` (the key is shown once).


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
    """Users with their memberships inline; memberships added, changed or removed here, and those a
    deleted user loses, are recorded in the audit log as on the membership page."""

    inlines = [*UserAdmin.inlines, MembershipInline]

    def get_queryset(self, request):
        queryset = super().get_queryset(request)
        tenant = admin_tenant(request)
        if tenant is UNSCOPED:
            return queryset
        return queryset.filter(memberships__tenant=tenant) if tenant is not None else queryset.none()

    def save_formset(self, request, form, formset, change):
        if formset.model is not Membership:
            return super().save_formset(request, form, formset, change)
        deleted = [f.instance for f in formset.deleted_forms if f.instance.pk is not None]
        changed = {
            f.instance.pk: audit_form_changes(f)
            for f in formset.initial_forms
            if f.instance.pk is not None and f.instance not in deleted and f.has_changed()
        }
        for membership in deleted:  # recorded before the rows go, in the page's transaction
            _membership_record("deleted", membership, _membership_removed(membership))
        super().save_formset(request, form, formset, change)
        for membership in formset.new_objects:
            _membership_record("created", membership, {"role": [None, membership.role]})
        for membership, _fields in formset.changed_objects:
            if changed.get(membership.pk):
                _membership_record("changed", membership, changed[membership.pk])

    # What makes an account more (or less) powerful: recorded in each of the user's tenants.
    audited_fields = ("username", "is_active", "is_staff", "is_superuser", "groups", "user_permissions")

    def save_model(self, request, obj, form, change):
        obj._audit_user_changes = {
            name: [_shown(form.initial.get(name)), _shown(form.cleaned_data.get(name))]
            for name in form.changed_data
            if name in self.audited_fields
        }
        super().save_model(request, obj, form, change)

    def log_change(self, request, obj, message):
        entry = super().log_change(request, obj, message)
        changes = getattr(obj, "_audit_user_changes", None)
        if changes is None and request.path.rstrip("/").endswith("/password"):
            changes = {"password": "changed"}
        if changes:
            _user_record(obj, "user.changed", changes)
        return entry

    def log_deletions(self, request, queryset):
        # A deleted user's memberships (and their tokens) go with them.
        for user in queryset:
            with rls_bypass():  # a user's memberships span tenants
                memberships = list(Membership.objects.filter(user=user).select_related("tenant", "user"))
            for membership in memberships:
                _membership_record("deleted", membership, {**_membership_removed(membership), "user_deleted": True})
        return super().log_deletions(request, queryset)


def _shown(value):
    """A user form's value as the audit log keeps it (querysets of groups or permissions as names)."""
    if hasattr(value, "values_list"):
        return sorted(str(item) for item in value)
    if isinstance(value, list | tuple | set):
        return sorted(str(item) for item in value)
    return value


def _user_record(user, action: str, changes: dict) -> None:
    """Record a change of ``user``'s account in each tenant they belong to (none: installation-wide)."""
    with rls_bypass():  # a user's memberships span tenants
        tenants = list(Membership.objects.filter(user=user).values_list("tenant_id", flat=True)) or [None]
    for tenant_id in tenants:
        audit_record(action=action, tenant=tenant_id, obj=user, object_type="user", changes=changes)


def _membership_record(verb: str, membership: Membership, changes: dict) -> None:
    audit_record(action=_membership_action(verb, changes), tenant=membership.tenant_id, obj=membership, changes=changes)


User = get_user_model()
if admin.site.is_registered(User):
    admin.site.unregister(User)
admin.site.register(User, UserWithMembershipsAdmin)


@admin.register(MembershipToken)
class MembershipTokenAdmin(AuditedAdminMixin, TenantScopedAdmin):
    """Membership tokens: listed, renamed and revoked (deleted) here; made with
    ``manage.py membershiptoken`` (the key is shown once). Revoking is recorded in the audit log."""

    list_display = ["prefix", "name", "membership", "created_at", "last_used_at"]
    list_select_related = ["membership__user", "membership__tenant"]
    search_fields = ["name", "prefix", "membership__user__username"]
    readonly_fields = ["membership", "prefix", "created_at", "last_used_at"]
    audit_actions = {"changed": "token.changed", "deleted": "token.revoked"}

    def audit_tenants(self, obj):
        return [obj.membership.tenant_id]

    def audit_deleted(self, obj):
        return {"user": obj.membership.user.get_username(), "name": obj.name}

    def has_add_permission(self, request):
        return False


# A user's plain DRF token (rest_framework.authtoken, for superusers): created and revoked here,
# recorded in each tenant the user belongs to. The log never holds the key (the token's ``str``).
admin.site.unregister(TokenProxy)


@admin.register(TokenProxy)
class AuditedTokenAdmin(AuditedAdminMixin, TokenAdmin):
    audit_actions = {"created": "token.created", "deleted": "token.revoked"}
    audit_object_type = "token"

    def audit_tenants(self, obj):
        with rls_bypass():  # a user's memberships span tenants
            tenant_ids = list(Membership.objects.filter(user_id=obj.user_id).values_list("tenant_id", flat=True))
        return tenant_ids or [None]

    def audit_repr(self, obj):
        return f"API token of {obj.user}"

    def audit_deleted(self, obj):
        return {"user": obj.user.get_username()}


# --- The audit log (core.audit) ----------------------------------------------------------------


@admin.register(AuditEvent)
class AuditEventAdmin(TenantScopedAdmin):
    """The tenant's audit log, read-only for everyone (the database refuses edits anyway): tenant
    admins (owners and admins with the view permission) read their tenant's events, superusers
    every tenant's, including sign-in failures of unknown usernames (no tenant)."""

    list_display = ["created_at", "actor_label", "action", "object_type", "object_repr", "client_ip", "tenant"]
    list_filter = ["tenant", "action", "object_type"]
    search_fields = ["actor_label", "action", "object_type", "object_id", "object_repr"]
    date_hierarchy = "created_at"
    ordering = ["-created_at", "-id"]
    fields = [
        "created_at",
        "tenant",
        "actor",
        "actor_label",
        "client_ip",
        "action",
        "object_type",
        "object_id",
        "object_repr",
        "changes",
    ]
    readonly_fields = fields

    def get_list_display(self, request):
        shown = super().get_list_display(request)
        return shown if admin_tenant(request) is UNSCOPED else [name for name in shown if name != "tenant"]

    def has_view_permission(self, request, obj=None):
        if not super().has_view_permission(request, obj):
            return False
        tenant = admin_tenant(request)
        if tenant is UNSCOPED:
            return True
        return tenant is not None and any(
            m.tenant_id == tenant.pk and m.role in (Membership.Role.OWNER, Membership.Role.ADMIN)
            for m in membership_list(user=request.user)
        )

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False
