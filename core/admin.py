"""Tenant isolation in the Django admin, shared by every app's ``admin.py``, and the admin of
tenancy itself: tenants, memberships (also inline on the user page), membership tokens and the
audit log.

Additions, changes and deletions of the audited models are recorded in the audit log
(``AuditedAdminMixin``, ``core.audit``).

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
from rest_framework.authtoken.admin import TokenAdmin
from rest_framework.authtoken.models import TokenProxy

from core.audit import audit_record, audit_shown
from core.memberships import SESSION_KEY, membership_list
from core.models import AuditEvent, Membership, MembershipToken, Tenant
from core.rls import rls_bypass, rls_request_bind

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


def audit_form_changes(form, *, add: bool = False) -> dict:
    """What a submitted model form changes, for the audit log: ``{"field": [before, after]}`` of
    each changed field (of every filled-in field when ``add``, with ``before`` = ``None``), rows
    shown by their ``str``. Password fields are left out."""
    changes = {}
    for name in list(form.cleaned_data) if add else form.changed_data:
        field = form.fields.get(name)
        if field is None or isinstance(field.widget, forms.PasswordInput) or name not in form.cleaned_data:
            continue
        after = audit_shown(form.cleaned_data[name])
        if add:
            if after not in (None, "", [], {}):
                changes[name] = [None, after]
            continue
        before = form.initial.get(name)
        single_row = isinstance(field, forms.ModelChoiceField) and not isinstance(field, forms.ModelMultipleChoiceField)
        if single_row and before is not None and not hasattr(before, "pk"):
            before = field.queryset.model._default_manager.filter(pk=before).first() or before
        before = audit_shown(before)
        if before != after:
            changes[name] = [before, after]
    return changes


class AuditedAdminMixin:
    """Records the admin's additions, changes and deletions of its model in the audit log
    (``core.audit.audit_record``), through Django's own hooks (``log_addition``, ``log_change``,
    ``log_deletions``), so the add and change pages, list editing and the delete page and action
    are all covered. Each event names the row's tenant, the row, and what changed
    (``audit_form_changes``).

    ``audit_actions`` maps ``"created"``, ``"changed"`` and ``"deleted"`` to the action recorded;
    a verb left out is not recorded here (a service this admin calls records it).
    """

    audit_actions: dict[str, str] = {}
    audit_object_type: str = ""  # default: the model's name

    def audit_tenants(self, obj) -> list[int | None]:
        """The tenants whose log gets the event (default: the row's ``tenant_id``)."""
        return [getattr(obj, "tenant_id", None)]

    def audit_repr(self, obj) -> str:
        """How the log names the row (default: its ``str``)."""
        return str(obj)

    def audit_action(self, verb: str, obj, changes: dict) -> str | None:
        """The action recorded for ``verb`` on ``obj`` (``None``: nothing is recorded)."""
        return self.audit_actions.get(verb)

    def audit_deleted(self, obj) -> dict:
        """What the log keeps of a deleted row (``changes`` of its deletion event)."""
        return {}

    def _audit(self, verb: str, obj, changes: dict) -> None:
        action = self.audit_action(verb, obj, changes)
        if not action:
            return
        for tenant_id in self.audit_tenants(obj):
            audit_record(
                action=action,
                tenant=tenant_id,
                obj=obj,
                object_type=self.audit_object_type,
                object_repr=self.audit_repr(obj),
                changes=changes,
            )

    def save_model(self, request, obj, form, change):
        obj._audit_changes = audit_form_changes(form, add=not change)
        super().save_model(request, obj, form, change)

    def log_addition(self, request, obj, message):
        entry = super().log_addition(request, obj, message)
        self._audit("created", obj, getattr(obj, "_audit_changes", {}))
        return entry

    def log_change(self, request, obj, message):
        entry = super().log_change(request, obj, message)
        changes = getattr(obj, "_audit_changes", None)
        if changes:  # "Save" without a change records nothing
            self._audit("changed", obj, changes)
        return entry

    def log_deletions(self, request, queryset):
        # Called before the rows are deleted, inside the delete page's transaction.
        for obj in queryset:
            self._audit("deleted", obj, self.audit_deleted(obj))
        return super().log_deletions(request, queryset)


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
