"""Admin of the quality gate: changes of a tenant's retrieval settings (proposed here, applied or
refused by the gate, a refusal overridden by an action) and the tenants' quality policies."""

from __future__ import annotations

import json

from django import forms
from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied as DjangoPermissionDenied
from django.http import HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import path, reverse
from django.utils.html import format_html, format_html_join

from core.admin import ReadOnlyAdminMixin, TenantScopedAdmin, admin_view_tenant, tenant_page_context
from core.errors import ApplicationError
from quality.models import ConfigChange, QualityPolicy
from quality.selectors import quality_tolerance
from quality.services import config_change_override, config_change_propose
from retrieval.pipeline import PIPELINE_NAMES


class ProposeSettingsForm(forms.Form):
    """Settings to propose to the quality gate: a JSON object of retrieval settings (``config``)."""

    config = forms.CharField(
        label="Settings to change (JSON)",
        widget=forms.Textarea(attrs={"rows": 8, "cols": 80, "spellcheck": "false"}),
        help_text=(
            'Keys of the retrieval settings with their new values, e.g. {"pipeline": "expand"} or '
            '{"fusion": "rrf", "rrf_k": 60}. Keys you leave out keep their current value.'
        ),
    )

    def clean_config(self) -> dict:
        try:
            value = json.loads(self.cleaned_data["config"])
        except json.JSONDecodeError as exc:
            raise forms.ValidationError(f"Not valid JSON: {exc}.") from exc
        if not isinstance(value, dict):
            raise forms.ValidationError("Give a JSON object of settings.")
        return value


def deltas_table(deltas: dict):
    """The deltas of a gate evaluation as an HTML table (every value escaped)."""
    if not deltas:
        return "—"
    rows = [
        (list_name, metric, values.get("a"), values.get("b"), values.get("delta"))
        for list_name, metrics in deltas.items()
        for metric, values in metrics.items()
    ]
    body = format_html_join(
        "",
        "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
        rows,
    )
    return format_html(
        "<table><thead><tr><th>Judgment list</th><th>Metric</th><th>Current</th><th>Proposed</th>"
        "<th>Delta</th></tr></thead><tbody>{}</tbody></table>",
        body,
    )


@admin.register(ConfigChange)
class ConfigChangeAdmin(ReadOnlyAdminMixin, TenantScopedAdmin):
    """Changes of retrieval settings through the quality gate: read-only, plus overriding a refusal."""

    change_list_template = "admin/quality/configchange/change_list.html"
    list_display = ("id", "tenant", "status", "progress", "ndcg_delta", "requested_by", "created_at", "finished_at")
    list_filter = ("status",)
    fields = (
        "tenant",
        "status",
        "progress",
        "current_config",
        "proposed_config",
        "tolerance",
        "deltas_shown",
        "runs",
        "error",
        "requested_by",
        "override_by",
        "override_at",
        "created_at",
        "finished_at",
    )
    readonly_fields = fields
    actions = ["override_and_apply"]

    def has_delete_permission(self, request, obj=None):
        return False  # the record of who changed what

    def get_urls(self):
        propose = path("propose/", self.admin_site.admin_view(self.propose_view), name="quality_configchange_propose")
        return [propose, *super().get_urls()]

    @admin.display(description="Progress")
    def progress(self, obj: ConfigChange) -> str:
        return f"{obj.progress_done}/{obj.progress_total}"

    @admin.display(description="Worst nDCG@10 delta")
    def ndcg_delta(self, obj: ConfigChange):
        values = [m["ndcg@10"]["delta"] for m in obj.deltas.values() if "ndcg@10" in m]
        return min(values) if values else ""

    @admin.display(description="Deltas (proposed − current)")
    def deltas_shown(self, obj: ConfigChange):
        return deltas_table(obj.deltas)

    @admin.action(description="Override and apply (refused changes)")
    def override_and_apply(self, request, queryset):
        for change in queryset.order_by("pk"):
            try:
                config_change_override(change_id=change.pk, user=request.user)
            except ApplicationError as exc:
                self.message_user(request, f"Change {change.pk}: {exc.message}", level=messages.ERROR)
            else:
                self.message_user(request, f"Change {change.pk} applied over the refusal; your name is recorded.")

    def propose_view(self, request):
        """Propose new retrieval settings for a tenant; the quality gate decides whether they apply."""
        if not self.has_view_permission(request):
            raise DjangoPermissionDenied
        tenant = admin_view_tenant(request)
        form = ProposeSettingsForm(request.POST or None, initial={"config": "{}"})
        if tenant is not None and request.method == "POST" and form.is_valid():
            try:
                change = config_change_propose(tenant=tenant, user=request.user, proposed=form.cleaned_data["config"])
            except ApplicationError as exc:
                form.add_error("config", exc.message)
            else:
                self.message_user(
                    request,
                    f"Settings change {change.pk}: {change.get_status_display()}.",
                    level=messages.WARNING if change.status in ("refused", "failed") else messages.SUCCESS,
                )
                return HttpResponseRedirect(reverse("admin:quality_configchange_change", args=[change.pk]))
        context = tenant_page_context(
            self,
            request,
            tenant=tenant,
            title="Propose retrieval settings",
            tenant_title=f"Propose retrieval settings for {tenant}",
        )
        context["form"] = form
        if tenant is not None:
            context.update(
                current_config=json.dumps(tenant.retrieval_config or {}, indent=2, sort_keys=True),
                tolerance=quality_tolerance(tenant=tenant),
                pipelines=PIPELINE_NAMES,
            )
        return TemplateResponse(request, "admin/quality/propose.html", context)


@admin.register(QualityPolicy)
class QualityPolicyAdmin(TenantScopedAdmin):
    """Each tenant's quality gate settings: how far mean nDCG@10 may drop before a change is refused."""

    list_display = ("tenant", "tolerance")
