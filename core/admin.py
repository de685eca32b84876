"""Tenant isolation in the Django admin, shared by every app's ``admin.py``, and the admin of
tenancy itself: tenants, memberships (also inline on the user page) and membership tokens.

A superuser sees and edits every tenant's rows. A staff user who is not a superuser is a
*tenant admin*: every changelist, change page, foreign-key choice and list filter is limited to
the tenant of their membership (of several: ``admin_tenant``), and rows they create are forced into that tenant. The models'
default managers must offer ``for_tenant`` (``core.tenancy.TenantScopedQuerySet``).
"""

from __future__ import annotations

from django import forms
from django.contrib import admin
from django.contrib.auth import get_user_model
from django.contrib.auth.admin import UserAdmin
from django.core.exceptions import PermissionDenied as DjangoPermissionDenied
from django.db.models import Count

from core.memberships import SESSION_KEY, membership_list
from core.models import Membership, MembershipToken, Tenant
from core.rls import rls_request_bind

UNSCOPED = object()


def admin_tenant(request):
    """The tenant a request's admin views are limited to: ``None`` for no rows at all, or
    ``UNSCOPED`` for a superuser. Cached on the request.

    A user of several tenants administers the one chosen in the session (the portal's tenant
    switcher, ``core.memberships.membership_choose``) when their role there is admin or
    owner, else their first such tenant by slug; only without any admin or owner membership,
    the chosen (or only) membership's tenant, as before memberships were several."""
    if not hasattr(request, "_admin_tenant"):
        if request.user.is_superuser:
            request._admin_tenant = UNSCOPED
        else:
            request._admin_tenant = _administered_tenant(request)
    return request._admin_tenant


def _administered_tenant(request):
    memberships = membership_list(user=request.user)
    managing = [m for m in memberships if m.role in ("admin", "owner")] or memberships
    chosen = request.session.get(SESSION_KEY) if hasattr(request, "session") else None
    membership = next((m for m in managing if m.tenant.slug == chosen), managing[0] if managing else None)
    if membership:
        rls_request_bind(tenant_id=membership.tenant_id, user_id=membership.user_id)
    return membership.tenant if membership else None


def admin_view_tenant(request):
    """The tenant a custom admin page shows: the staff member's, or ``?tenant=<slug>`` for a
    superuser (``None`` until they pick one). ``PermissionDenied`` for staff without a tenant."""
    tenant = admin_tenant(request)
    if tenant is UNSCOPED:
        slug = request.GET.get("tenant") or request.POST.get("tenant")
        return Tenant.objects.filter(slug=slug).first() if slug else None
    if tenant is None:
        raise DjangoPermissionDenied("Your account does not belong to any tenant.")
    return tenant


def tenant_page_context(model_admin, request, *, tenant, title: str, tenant_title: str) -> dict:
    """The context every custom admin page of a tenant starts from (template
    ``admin/quality/tenant_page.html``): the admin's, ``opts``, ``title`` (``tenant_title`` once a
    tenant is chosen), ``tenant``, ``superuser`` and, until a superuser picks one, ``tenants``."""
    context = {
        **model_admin.admin_site.each_context(request),
        "opts": model_admin.model._meta,
        "title": tenant_title if tenant else title,
        "tenant": tenant,
        "superuser": admin_tenant(request) is UNSCOPED,
    }
    if tenant is None:
        context["tenants"] = Tenant.objects.order_by("slug")
    return context


def _is_tenant_filter(entry) -> bool:
    field = entry[0] if isinstance(entry, (list, tuple)) else entry
    return isinstance(field, str) and field.split("__")[-1] == "tenant"


class TenantScopedForm(forms.ModelForm):
    """Keeps a row's tenant fixed once created, and its source in the same tenant."""

    def clean(self):
        cleaned = super().clean()
        instance = self.instance
        tenant = cleaned.get("tenant") if "tenant" in self.fields else getattr(instance, "tenant", None)
        if "tenant" in self.fields and instance.pk and tenant and tenant.pk != instance.tenant_id:
            self.add_error("tenant", "A row cannot move to another tenant.")
        source = cleaned.get("source")
        if source is not None and tenant is not None and source.tenant_id != tenant.pk:
            self.add_error("source", "The source belongs to another tenant.")
        return cleaned


class TenantScopedAdmin(admin.ModelAdmin):
    """Limits a tenant model's admin to the user's tenant unless the user is a superuser.

    The model's default manager must offer ``for_tenant`` (``TenantScopedQuerySet``).
    """

    form = TenantScopedForm

    def get_queryset(self, request):
        queryset = super().get_queryset(request)
        tenant = admin_tenant(request)
        if tenant is UNSCOPED:
            return queryset
        if tenant is None:
            return queryset.none()
        return queryset.for_tenant(tenant)

    def get_list_filter(self, request):
        filters = super().get_list_filter(request)
        if admin_tenant(request) is UNSCOPED:
            return filters
        return [entry for entry in filters if not _is_tenant_filter(entry)]

    def formfield_for_foreignkey(self, db_field, request, **kwargs):
        tenant = admin_tenant(request)
        if tenant is not UNSCOPED:
            kwargs["queryset"] = _choices_for(db_field.related_model, tenant)
            if db_field.related_model is Tenant and tenant is not None:
                kwargs["initial"] = tenant.pk
        return super().formfield_for_foreignkey(db_field, request, **kwargs)

    def formfield_for_manytomany(self, db_field, request, **kwargs):
        tenant = admin_tenant(request)
        if tenant is not UNSCOPED:
            kwargs["queryset"] = _choices_for(db_field.related_model, tenant)
        return super().formfield_for_manytomany(db_field, request, **kwargs)

    def save_model(self, request, obj, form, change):
        tenant = admin_tenant(request)
        if not change and tenant is not UNSCOPED and hasattr(obj, "tenant_id"):
            obj.tenant = tenant
        super().save_model(request, obj, form, change)


def _choices_for(model, tenant):
    """The rows of ``model`` a tenant admin of ``tenant`` may pick in a foreign-key field."""
    if tenant is None:
        return model._default_manager.none()
    if model is Tenant:
        return model.objects.filter(pk=tenant.pk)
    if model is get_user_model():
        return model._default_manager.filter(memberships__tenant=tenant)
    return model._default_manager.for_tenant(tenant)


class ReadOnlyAdminMixin:
    """Rows written only by ingestion: viewable, never added or changed here."""

    def has_add_permission(self, request, obj=None):
        return False

    def has_change_permission(self, request, obj=None):
        return False


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
        if request.user.is_superuser:
            return ["created_at", *gated]
        # Changing the embedder needs a re-embed of every chunk: a superuser's job.
        return ["slug", "embedder", "created_at", *gated]

    def has_add_permission(self, request):
        return request.user.is_superuser and super().has_add_permission(request)

    def has_delete_permission(self, request, obj=None):
        return request.user.is_superuser and super().has_delete_permission(request, obj)

    @admin.display(description="members", ordering="member_count")
    def member_count(self, obj):
        return obj.member_count

    @admin.display(description="documents", ordering="document_count")
    def document_count(self, obj):
        return obj.document_count


@admin.register(Membership)
class MembershipAdmin(TenantScopedAdmin):
    list_display = ["user", "tenant", "role"]
    list_filter = ["tenant", "role"]
    list_select_related = ["user", "tenant"]
    search_fields = ["user__username", "user__email", "tenant__slug"]


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
