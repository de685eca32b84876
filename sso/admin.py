"""Admin of single sign-on: superusers only (the operator), like the tenants' quotas.

A tenant's provider decides which server this one fetches from and who may sign in to the
tenant, so tenant admins never see these pages, whatever their Django permissions. The client
secret is write-only: the form never shows it, and leaving its field empty keeps the stored one.
Saves and deletes go through ``sso.services`` (validated, recorded in the audit log).
"""

from __future__ import annotations

from django import forms
from django.contrib import admin

from core.admin import SuperuserOnlyAdminMixin
from core.errors import InvalidInput
from sso.models import Identity, TenantSso
from sso.services import EDITABLE, tenant_sso_check, tenant_sso_remove, tenant_sso_save


class TenantSsoForm(forms.ModelForm):
    new_client_secret = forms.CharField(
        label="Client secret",
        required=False,
        strip=True,
        widget=forms.PasswordInput(render_value=False, attrs={"autocomplete": "new-password"}),
        help_text="Write-only: never shown. Leave empty to keep the stored secret.",
    )

    class Meta:
        model = TenantSso
        fields = ["tenant", *EDITABLE]

    def clean(self):
        cleaned = super().clean()
        secret = cleaned.get("new_client_secret")
        if secret:
            self.instance.client_secret = secret
        return cleaned

    def _post_clean(self):
        super()._post_clean()
        try:
            tenant_sso_check(self.instance)
        except InvalidInput as exc:
            self.add_error(None, exc.message)


@admin.register(TenantSso)
class TenantSsoAdmin(SuperuserOnlyAdminMixin, admin.ModelAdmin):
    form = TenantSsoForm
    list_display = ["tenant", "name", "provider", "enabled", "create_memberships", "updated_at"]
    list_select_related = ["tenant"]
    search_fields = ["tenant__slug", "name", "issuer"]
    readonly_fields = ["secret_stored", "updated_at"]

    def get_fields(self, request, obj=None):
        return [
            "tenant",
            "enabled",
            "name",
            "issuer",
            "client_id",
            "new_client_secret",
            "secret_stored",
            "scopes",
            "role_claim",
            "role_values",
            "default_role",
            "groups_claim",
            "create_memberships",
            "allow_other_tenants_members",
            "updated_at",
        ]

    def get_readonly_fields(self, request, obj=None):
        # Single sign-on belongs to its tenant for good: another tenant gets one of its own.
        return [*self.readonly_fields, "tenant"] if obj is not None else self.readonly_fields

    @admin.display(description="provider")
    def provider(self, obj):
        return obj.issuer or "the installation's"

    @admin.display(description="secret stored", boolean=True)
    def secret_stored(self, obj):
        return bool(obj.client_secret)

    def save_model(self, request, obj, form, change):
        values = {name: form.cleaned_data[name] for name in EDITABLE if name in form.cleaned_data}
        secret = form.cleaned_data.get("new_client_secret") or None
        tenant = obj.tenant if change else form.cleaned_data["tenant"]
        saved = tenant_sso_save(tenant=tenant, values=values, client_secret=secret)
        obj.pk = saved.pk

    def delete_model(self, request, obj):
        tenant_sso_remove(tenant=obj.tenant)

    def delete_queryset(self, request, queryset):
        for obj in queryset.select_related("tenant"):
            tenant_sso_remove(tenant=obj.tenant)


@admin.register(Identity)
class IdentityAdmin(SuperuserOnlyAdminMixin, admin.ModelAdmin):
    """Which provider account signs in as which user, and through which tenant's provider (none:
    the installation's); deleting a row unlinks it (the next sign-in links again by verified
    email, or makes a new account where allowed)."""

    list_display = ["user", "tenant", "issuer", "subject", "created_at", "last_signed_in_at"]
    list_select_related = ["user", "tenant"]
    search_fields = ["user__username", "tenant__slug", "issuer", "subject"]
    readonly_fields = ["tenant", "issuer", "subject", "user", "created_at", "last_signed_in_at"]

    def has_add_permission(self, request, obj=None):
        return False

    def has_change_permission(self, request, obj=None):
        return False
