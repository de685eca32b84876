"""Admin of the tenants' quotas (``knowledge.TenantQuota``): superusers only.

Operators set a tenant's limits here or with ``manage.py quota``; every change is recorded in the
audit log as ``quota.changed``. Tenant admins do not see this page at all, whatever their Django
permissions: they read their usage against the limits on the portal's sources page and at
``GET /api/v1/usage/``. The change page shows the tenant's usage against each limit
(``knowledge.quotas.usage.quota_usage``). Registered by importing it from ``knowledge.admin``.
"""

from __future__ import annotations

from django.contrib import admin
from django.utils.html import format_html, format_html_join

from core.admin import SuperuserOnlyAdminMixin
from knowledge.models import TenantQuota
from knowledge.quotas.limits import QUOTAS, quota_change_record
from knowledge.quotas.usage import quota_usage


def _shown(limit: int | None) -> str:
    return "unlimited" if limit is None else f"{limit:,}"


@admin.register(TenantQuota)
class TenantQuotaAdmin(SuperuserOnlyAdminMixin, admin.ModelAdmin):
    """Superusers only: a tenant admin holding the knowledge app's permissions must not raise their own limits."""

    list_display = ["tenant", *[f"limit_{q.name}" for q in QUOTAS], "updated_at"]
    list_select_related = ["tenant"]
    search_fields = ["tenant__slug", "tenant__name"]
    fields = ["tenant", *[q.field for q in QUOTAS], "usage", "updated_at"]
    readonly_fields = ["usage", "updated_at"]

    def get_readonly_fields(self, request, obj=None):
        # A quota belongs to its tenant for good: another tenant gets a quota of its own.
        return [*self.readonly_fields, "tenant"] if obj is not None else self.readonly_fields

    def get_form(self, request, obj=None, change=False, **kwargs):
        form = super().get_form(request, obj, change=change, **kwargs)
        for quota in QUOTAS:
            field = form.base_fields.get(quota.field)
            if field is not None:
                # Stored bytes count the versions' text only (docs/quotas.md), whatever the model says.
                what = "Bytes (UTF-8) of the text of every stored version." if quota.name == "stored_bytes" else ""
                field.help_text = (
                    f"{what or field.help_text} Empty: the installation default "
                    f"({_shown(quota.default())}, {quota.setting}). 0 allows none."
                )
        return form

    def save_model(self, request, obj, form, change):
        before = TenantQuota.objects.filter(pk=obj.pk).values(*(q.field for q in QUOTAS)).first() if change else {}
        super().save_model(request, obj, form, change)
        changes = {
            q.field: [(before or {}).get(q.field), getattr(obj, q.field)]
            for q in QUOTAS
            if (before or {}).get(q.field) != getattr(obj, q.field)
        }
        if changes:
            quota_change_record(quota=obj, changes=changes)

    def delete_model(self, request, obj):
        changes = {q.field: [getattr(obj, q.field), None] for q in QUOTAS if getattr(obj, q.field) is not None}
        super().delete_model(request, obj)
        if changes:
            quota_change_record(quota=obj, changes=changes)

    def delete_queryset(self, request, queryset):
        for quota in queryset:
            self.delete_model(request, quota)

    @admin.display(description="usage")
    def usage(self, obj):
        """The tenant's usage against each limit (what applies now: its own or the default)."""
        if obj is None or obj.tenant_id is None:
            return "-"
        rows = [
            (q.label, q.used_text, q.limit_text, "" if q.own else " (default)")
            for q in quota_usage(tenant=obj.tenant).values()
        ]
        return format_html(
            "<table><tr><th>quota</th><th>used</th><th>limit</th></tr>{}</table>",
            format_html_join("", "<tr><td>{}</td><td>{}</td><td>{}{}</td></tr>", rows),
        )


def _limit_column(quota):
    @admin.display(description=quota.name.replace("_", " "))
    def column(self, obj):
        own = getattr(obj, quota.field)
        return _shown(own) if own is not None else f"default ({_shown(quota.default())})"

    return column


for _quota in QUOTAS:
    setattr(TenantQuotaAdmin, f"limit_{_quota.name}", _limit_column(_quota))
