"""Django admin for sources and their syncs, isolated by tenant like the rest of ``knowledge.admin``.

The source form groups its fields by the kinds that use them (a service source's page shows only
the service's fields and its last content and permission syncs) and checks a source with
``knowledge.services.sources.source_check``, the check the API and the CLI use, so all three
accept and refuse the same sources; it saves through ``source_create`` and ``source_update``.
Globs are edited one per line and schedules as "30m", "1h", "1d". A service source's secret is
write-only: a password field that never renders the stored value, and left empty keeps it.
"Sync now" and "Test connection" (changelist actions, and buttons on the change page: template
``admin/knowledge/source/submit_line.html``) call ``knowledge.services.sync.sync_run_request``
and ``knowledge.services.sources.source_test``; a source's newest runs are listed on its page,
and every run in the read-only sync run admin (``knowledge.admin_sync_runs``). Imported by
``knowledge.admin``, which the admin autodiscovers.
"""

from __future__ import annotations

import copy
import re
from datetime import timedelta

from django import forms
from django.contrib import admin, messages
from django.contrib.admin.utils import unquote
from django.core.exceptions import ValidationError
from django.db.models import Count, OuterRef, Q, Subquery
from django.forms.models import construct_instance
from django.http import HttpResponseRedirect

from core.admin import UNSCOPED, SuperuserOnlyAdminMixin, TenantScopedAdmin, TenantScopedForm, admin_tenant
from core.errors import ApplicationError, InvalidInput
from knowledge.admin_sync_runs import (
    SyncRunInline,
    content_sync_html,
    last_run_of,
    permission_sync_html,
    run_summary,
)
from knowledge.folder_grants import folder_grant_add, folder_grant_hard_links, folder_grant_remove
from knowledge.models import FolderGrant, Source, SyncRun
from knowledge.quotas import QuotaExceeded, quota_check
from knowledge.services.sources import (
    SOURCE_FIELDS,
    duration_parse,
    source_check,
    source_create,
    source_test,
    source_update,
)
from knowledge.services.sync import sync_run_request
from knowledge.services.versions import versions_prune

# --- Form fields ---------------------------------------------------------------------------------


class GlobListField(forms.Field):
    """A list of glob patterns edited as text, one pattern per line (blank lines ignored)."""

    widget = forms.Textarea(attrs={"rows": 3, "cols": 60})

    def prepare_value(self, value):
        if isinstance(value, list | tuple):
            return "\n".join(str(v) for v in value)
        return value

    def to_python(self, value) -> list[str]:
        if isinstance(value, list | tuple):
            return [str(v).strip() for v in value if str(v).strip()]
        return [line.strip() for line in (value or "").splitlines() if line.strip()]


_UNIT_SECONDS = (("w", 7 * 86400), ("d", 86400), ("h", 3600), ("m", 60))


def duration_format(value: timedelta | None) -> str:
    """``value`` as ``duration_parse`` reads it, in the largest whole unit: "30m", "1h", "2d", "1w"."""
    if value is None:
        return ""
    seconds = value.total_seconds()
    for unit, size in _UNIT_SECONDS:
        if seconds >= size and seconds % size == 0:
            return f"{int(seconds // size)}{unit}"
    return f"{seconds:g}s"


class DurationTextField(forms.CharField):
    """A schedule typed as "30m", "1h", "1d" or "1w" (empty = none), shown the same way."""

    def prepare_value(self, value):
        return duration_format(value) if isinstance(value, timedelta) else value

    def __init__(self, *, name: str = "sync_every", **kwargs):
        self.name = name  # the field's name in the messages of duration_parse, which says sync_every
        super().__init__(**kwargs)

    def to_python(self, value) -> timedelta | None:
        try:
            return duration_parse(super().to_python(value))
        except InvalidInput as exc:
            raise ValidationError(exc.message.replace("sync_every", self.name), code=exc.code) from None


# --- The source form -----------------------------------------------------------------------------

# The field an error of ``source_check`` is about, by its code (else the first field its message names).
_ERROR_FIELDS = {
    "location_required": "location",
    "invalid_location": "location",
    "location_not_allowed": "location",
    "address_not_allowed": "location",
    "invalid_sync_every": "sync_every",
    "invalid_page_limit": "page_limit",
    "invalid_crawl_delay": "crawl_delay_s",
    "invalid_secret": "secret",
    "secret_required": "secret",
    "invalid_options": "options",
    "invalid_perm_every": "perm_every",
}

SECRET_HELP = (
    "The token or key the service is read with (docs/connectors.md: the scopes it needs). Write-only: "
    "stored encrypted and never shown. {state}"
)


class SourceForm(TenantScopedForm):
    """Checks a source with ``source_check`` (the API's and CLI's check); its ``InvalidInput`` is a
    form error on the field it names. Fields with a model default (page limit, crawl delay) fall
    back to it when left empty. A service source's ``secret`` is write-only: never rendered (not
    even as the form's initial value), and left empty it keeps the stored one."""

    include = GlobListField(required=False, help_text=f"{Source._meta.get_field('include').help_text} One per line.")
    exclude = GlobListField(required=False, help_text=f"{Source._meta.get_field('exclude').help_text} One per line.")
    sync_every = DurationTextField(
        required=False,
        help_text="Sync on a schedule this often: 30m, 1h, 1d or 1w (at least 1m); empty = only by hand.",
    )
    secret = forms.CharField(
        required=False,
        max_length=20_000,
        widget=forms.PasswordInput(render_value=False, attrs={"autocomplete": "new-password", "size": 60}),
    )
    perm_every = DurationTextField(
        name="perm_every",
        required=False,
        help_text="Sync the permissions (readers, groups, deletions) this often: 15m, 1h (at least the server's "
        "minimum); empty = the server's default.",
    )

    class Meta:
        model = Source
        fields = "__all__"

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        for name in ("page_limit", "crawl_delay_s"):
            if name in self.fields:
                field = self.fields[name]
                field.required = False
                field.help_text = f"{field.help_text} Empty = {Source._meta.get_field(name).default}."
        self.initial.pop("secret", None)  # never rendered; and an empty field is then "unchanged"
        if "secret" in self.fields:
            stored = bool(self.instance.pk and self.instance.secret)
            keep = "A token is stored: leave empty to keep it, or type a new one to replace it."
            state = keep if stored else "None is stored yet."
            self.fields["secret"].help_text = SECRET_HELP.format(state=state)

    def _clean_default(self, name):
        value = self.cleaned_data.get(name)
        return Source._meta.get_field(name).default if value is None else value

    def clean_page_limit(self):
        return self._clean_default("page_limit")

    def clean_crawl_delay_s(self):
        return self._clean_default("crawl_delay_s")

    def clean_secret(self):
        """The typed secret; left empty, the stored one (a service source keeps its token)."""
        typed = self.cleaned_data.get("secret") or ""
        kind = self.cleaned_data.get("kind", self.instance.kind)
        if typed or not self.instance.pk or kind not in Source.SERVICE_KINDS:
            return typed
        return self.instance.secret

    def clean_options(self):
        options = self.cleaned_data.get("options")
        return {} if options in (None, "") else options

    def clean(self):
        cleaned = super().clean()
        if self.errors:
            return cleaned  # the fields' own errors first; the check would repeat them
        candidate = construct_instance(self, copy.copy(self.instance))
        try:
            source_check(candidate)
            if self.instance.pk is None:
                quota_check(tenant=candidate.tenant, sources=1)
        except InvalidInput as exc:
            self.add_error(self._error_field(exc), exc.message)
            return cleaned
        except QuotaExceeded as exc:
            self.add_error(None, exc.message)
            return cleaned
        for name in ("location", "include", "exclude", "sync_every", "options", "perm_every"):  # as normalized
            if name in cleaned:
                cleaned[name] = getattr(candidate, name)
        return cleaned

    def _error_field(self, exc: InvalidInput) -> str | None:
        """The form field an error of ``source_check`` is about: by its code, else the first field
        its message names; ``None`` (the whole form) when it names none."""
        if _ERROR_FIELDS.get(exc.code) in self.fields:
            return _ERROR_FIELDS[exc.code]
        named = [(m.start(), m[0]) for m in re.finditer(r"[a-z_]+", exc.message) if m[0] in self.fields]
        return min(named)[1] if named else None


# --- Sources -----------------------------------------------------------------------------------------


@admin.register(Source)
class SourceAdmin(TenantScopedAdmin):
    form = SourceForm
    list_display = [
        "name",
        "tenant",
        "kind",
        "location",
        "schedule",
        "last_synced_at",
        "last_run_status",
        "document_count",
    ]
    list_filter = ["tenant", "kind"]
    list_select_related = ["tenant"]
    search_fields = ["name", "location", "tenant__slug"]
    readonly_fields = ["last_synced_at", "created_at", "last_perm_synced_at", "last_content_sync", "last_perm_sync"]
    fieldsets = [
        (
            "Source",
            {"fields": ["tenant", "name", "kind", "reliability", "half_life_days", "versions_kept", "created_at"]},
        ),
        (
            "Connector: folder, web, git",
            {
                "description": "Used by the kinds a connector syncs (folder, web, git); sources filled by hand "
                "(files, upload, dataset) ignore them. Branch is for git only; text format and URI prefix "
                "for folder and git.",
                "fields": [
                    "location",
                    "branch",
                    "include",
                    "exclude",
                    "text_format",
                    "uri_prefix",
                    "sync_every",
                    "last_synced_at",
                ],
            },
        ),
        (
            "Web only",
            {
                "description": "Used by web sources only: how many pages a sync reads at most, and how long it "
                "waits between two requests.",
                "fields": ["page_limit", "crawl_delay_s"],
            },
        ),
        (
            "Service: Slack, Confluence, Google Drive, GitHub, Jira, Notion",
            {
                "description": "Used by service sources, read from the service's API with their token or key "
                "(location: the API's base URL; empty = the public API, e.g. https://slack.com/api/; Confluence "
                "and Jira: your site). Options per kind: docs/connectors.md.",
                "fields": ["secret", "options", "perm_every"],
            },
        ),
    ]
    # A service source's page: the fields a service uses, and its last syncs (read-only).
    service_fieldsets = [
        fieldsets[0],
        ("Connector", {"fields": ["location", "sync_every", "last_synced_at"]}),
        (
            "Service",
            {
                "description": "The token or key, the kind's options (docs/connectors.md) and how often "
                "permissions are synced.",
                "fields": ["secret", "options", "perm_every", "last_perm_synced_at"],
            },
        ),
        ("Last syncs", {"fields": ["last_content_sync", "last_perm_sync"]}),
    ]
    inlines = [SyncRunInline]
    actions = ["sync_now", "test_connection"]

    def get_queryset(self, request):
        last_status = SyncRun.objects.filter(source=OuterRef("pk")).order_by("-created_at").values("status")[:1]
        return (
            super()
            .get_queryset(request)
            .annotate(
                document_count=Count("documents", filter=Q(documents__deleted_at__isnull=True)),
                last_run_status=Subquery(last_status),
            )
        )

    def get_list_display(self, request):
        columns = super().get_list_display(request)
        return columns if admin_tenant(request) is UNSCOPED else [c for c in columns if c != "tenant"]

    def get_inline_instances(self, request, obj=None):
        inlines = super().get_inline_instances(request, obj)
        if request.method == "POST":  # the runs are read-only: a saved form neither posts nor checks them
            return [inline for inline in inlines if not isinstance(inline, SyncRunInline)]
        return inlines

    def get_fieldsets(self, request, obj=None):
        if obj is not None and obj.is_service:
            return self.service_fieldsets
        if obj is not None:  # a folder, web, git or hand-filled source: no service fields
            return [fieldset for fieldset in self.fieldsets if "secret" not in fieldset[1]["fields"]]
        return self.fieldsets

    def save_model(self, request, obj, form, change):
        """Saved by ``source_create`` and ``source_update`` (checked, audited: a secret only as
        "set" or "changed"), with the fields the form holds."""
        tenant = admin_tenant(request)
        if not change and tenant is not UNSCOPED:
            obj.tenant = tenant
        if change:
            fields = {name: getattr(obj, name) for name in form.changed_data if name in (*SOURCE_FIELDS, "name")}
            if fields:
                source_update(source=obj, **fields)
        else:
            fields = {name: getattr(obj, name) for name in SOURCE_FIELDS}
            saved = source_create(tenant=obj.tenant, name=obj.name, **fields)
            obj.pk, obj.created_at, obj._state.adding = saved.pk, saved.created_at, False
        if change and "versions_kept" in form.changed_data:  # apply the new retention now
            versions_prune(source=obj)

    @admin.display(description="schedule", ordering="sync_every")
    def schedule(self, obj):
        return f"every {duration_format(obj.sync_every)}" if obj.sync_every else "-"

    @admin.display(description="last run", ordering="last_run_status")
    def last_run_status(self, obj):
        return SyncRun.Status(obj.last_run_status).label if obj.last_run_status else "-"

    @admin.display(description="documents", ordering="document_count")
    def document_count(self, obj):
        return obj.document_count

    @admin.display(description="last content sync")
    def last_content_sync(self, obj):
        return content_sync_html(last_run_of(obj, SyncRun.Scope.ALL, SyncRun.Scope.CONTENT))

    @admin.display(description="last permission sync")
    def last_perm_sync(self, obj):
        return permission_sync_html(last_run_of(obj, SyncRun.Scope.ALL, SyncRun.Scope.PERMISSIONS))

    # "Test connection": the action, and the service source's button (template
    # admin/knowledge/source/submit_line.html), which saves the form first (a new token is tested).

    @admin.action(description="Test connection", permissions=["change"])
    def test_connection(self, request, queryset):
        for source in queryset.select_related("tenant"):
            self._test(request, source)

    def _test(self, request, source: Source) -> None:
        try:
            line = source_test(source=source)
        except ApplicationError as exc:  # refused, unreachable, or not a service
            self.message_user(request, f"{source.name}: {exc.message}", messages.ERROR)
            return
        self.message_user(request, f"{source.name}: {line}", messages.SUCCESS)

    # "Sync now": the action, and the change page's button (template
    # admin/knowledge/source/submit_line.html), which saves the form first.

    @admin.action(description="Sync now", permissions=["change"])
    def sync_now(self, request, queryset):
        for source in queryset.select_related("tenant"):
            self._sync(request, source)

    def _sync(self, request, source: Source) -> None:
        try:
            run = sync_run_request(source=source)
        except ApplicationError as exc:  # not synced, or over the syncs-per-day quota
            self.message_user(request, exc.message, messages.ERROR)
            return
        level = {SyncRun.Status.DONE: messages.SUCCESS, SyncRun.Status.FAILED: messages.ERROR}
        self.message_user(request, run_summary(run), level.get(run.status, messages.INFO))

    def changeform_view(self, request, object_id=None, form_url="", extra_context=None):
        # The change form saves in a transaction; the sync is requested after it committed, so
        # that a sync run at once (no broker) has its counts in the message.
        response = super().changeform_view(request, object_id, form_url, extra_context)
        if request.method == "POST" and object_id and response.status_code == 302:
            button = next((name for name in ("_sync_now", "_test_connection") if name in request.POST), None)
            source = self.get_object(request, unquote(object_id)) if button else None
            if source is not None:
                (self._sync if button == "_sync_now" else self._test)(request, source)
        return response

    def response_change(self, request, obj):
        response = super().response_change(request, obj)
        if "_sync_now" in request.POST or "_test_connection" in request.POST:
            return HttpResponseRedirect(request.path)  # back to the page, whose runs show the new one
        return response


# --- Folder grants (operators only) ----------------------------------------------------------------


class FolderGrantForm(forms.ModelForm):
    """A grant's folder, checked and resolved by ``folder_grant_add`` (never the data directory)."""

    class Meta:
        model = FolderGrant
        fields = ["tenant", "path", "allow_hard_links"]

    def clean(self):
        cleaned = super().clean()
        path, tenant = cleaned.get("path"), cleaned.get("tenant")
        if path and tenant:
            from knowledge.folder_grants import path_in_data_dir, path_real

            try:
                real = path_real(path)
            except InvalidInput as exc:
                self.add_error("path", exc.message)
                return cleaned
            if path_in_data_dir(real):
                self.add_error("path", "The data directory (or a folder holding it) can never be granted.")
            elif not real.is_dir():
                self.add_error("path", f"{real}: no such folder.")
            else:
                cleaned["path"] = str(real)
        return cleaned


@admin.register(FolderGrant)
class FolderGrantAdmin(SuperuserOnlyAdminMixin, admin.ModelAdmin):
    """The folders each tenant's folder and local git sources may read. Only superusers (the
    operator) see, add or revoke grants; a tenant admin has no way to grant themselves a folder."""

    form = FolderGrantForm
    list_display = ["tenant", "path", "allow_hard_links", "granted_by", "created_at"]
    list_filter = ["tenant"]
    search_fields = ["path", "tenant__slug"]

    def has_change_permission(self, request, obj=None):
        return False  # a grant is added or revoked, never moved

    def save_model(self, request, obj, form, change):
        grant, _created = folder_grant_add(tenant=obj.tenant, path=obj.path, granted_by=request.user.get_username())
        if obj.allow_hard_links:
            grant = folder_grant_hard_links(tenant=obj.tenant, path=grant.path, allowed=True)
        obj.pk = grant.pk

    def delete_model(self, request, obj):
        folder_grant_remove(tenant=obj.tenant, path=obj.path)

    def delete_queryset(self, request, queryset):
        for grant in queryset.select_related("tenant"):
            folder_grant_remove(tenant=grant.tenant, path=grant.path)
