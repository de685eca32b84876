"""Tenant isolation in the Django admin, shared by every app's ``admin.py`` (through ``core.admin``).

A superuser sees and edits every tenant's rows. A staff user who is not a superuser is a
*tenant admin*: every changelist, change page, foreign-key choice and list filter is limited to
the tenant of their membership (of several: ``admin_tenant``), and rows they create are forced
into that tenant. The models' default managers must offer ``for_tenant``
(``core.tenancy.TenantScopedQuerySet``).
"""

from __future__ import annotations

from django import forms
from django.contrib import admin
from django.contrib.auth import get_user_model
from django.core.exceptions import PermissionDenied as DjangoPermissionDenied

from core.memberships import SESSION_KEY, membership_list
from core.models import Tenant
from core.rls import rls_request_bind

# ``admin_tenant``'s answer for a superuser: every tenant's rows.
UNSCOPED = object()


def admin_superuser(request) -> bool:
    """Whether the request's user is an active superuser (the operator)."""
    return request.user.is_active and request.user.is_superuser


def admin_tenant(request):
    """The tenant a request's admin views are limited to: ``None`` for no rows at all, or
    ``UNSCOPED`` for a superuser. Cached on the request.

    A user of several tenants administers the one chosen in the session (the portal's tenant
    switcher, ``core.memberships.membership_choose``) when their role there is admin or
    owner, else their first such tenant by slug; only without any admin or owner membership,
    the chosen (or only) membership's tenant, as before memberships were several."""
    if not hasattr(request, "_admin_tenant"):
        if admin_superuser(request):
            request._admin_tenant = UNSCOPED
        else:
            request._admin_tenant = _administered_tenant(request)
    return request._admin_tenant


def _administered_tenant(request):
    memberships = membership_list(user=request.user, request=request)
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


class SuperuserOnlyAdminMixin:
    """An admin only superusers see, add, change or delete in, whatever Django permissions a
    tenant admin holds (installation-wide settings: quotas, folder grants, single sign-on). A
    class that never allows a verb overrides that method after the mixin."""

    def has_module_permission(self, request):
        return admin_superuser(request)

    def has_view_permission(self, request, obj=None):
        return admin_superuser(request)

    def has_add_permission(self, request, obj=None):
        return admin_superuser(request)

    def has_change_permission(self, request, obj=None):
        return admin_superuser(request)

    def has_delete_permission(self, request, obj=None):
        return admin_superuser(request)


class ReadOnlyAdminMixin:
    """Rows written only by ingestion: viewable, never added or changed here."""

    def has_add_permission(self, request, obj=None):
        return False

    def has_change_permission(self, request, obj=None):
        return False
