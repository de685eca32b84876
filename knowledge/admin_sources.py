"""Django admin for sources and their syncs, isolated by tenant like the rest of ``knowledge.admin``.

The source form groups its fields by the kinds that use them and checks a source with
``knowledge.services.sources.source_check``, the check the API and the CLI use, so all three
accept and refuse the same sources. Globs are edited one per line and schedules as "30m", "1h",
"1d". "Sync now" (a changelist action, and a button on the change page: template
``admin/knowledge/source/submit_line.html``) calls
``knowledge.services.sync.sync_run_request``; a source's newest runs are listed on its page, and
every run in the read-only sync run admin. Imported by ``knowledge.admin``, which the admin
autodiscovers.
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
from django.utils.html import format_html, format_html_join

from core.admin import UNSCOPED, ReadOnlyAdminMixin, TenantScopedAdmin, TenantScopedForm, admin_tenant
from core.errors import ApplicationError, InvalidInput
from core.quotas import QuotaExceeded
from knowledge.folder_grants import folder_grant_add, folder_grant_hard_links, folder_grant_remove
from knowledge.models import FolderGrant, Source, SyncRun
from knowledge.quotas import quota_check
from knowledge.services.sources import duration_parse, source_check
from knowledge.services.sync import sync_run_request
from knowledge.services.versions import versions_prune

INLINE_RUNS = 20  # newest runs listed on a source's page

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

    def to_python(self, value) -> timedelta | None:
        try:
            return duration_parse(super().to_python(value))
        except InvalidInput as exc:
            raise ValidationError(exc.message, code=exc.code) from None


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
}


class SourceForm(TenantScopedForm):
    """Checks a source with ``source_check`` (the API's and CLI's check); its ``InvalidInput`` is a
    form error on the field it names. Fields with a model default (page limit, crawl delay) fall
    back to it when left empty."""

    include = GlobListField(required=False, help_text=f"{Source._meta.get_field('include').help_text} One per line.")
    exclude = GlobListField(required=False, help_text=f"{Source._meta.get_field('exclude').help_text} One per line.")
    sync_every = DurationTextField(
        required=False,
        help_text="Sync on a schedule this often: 30m, 1h, 1d or 1w (at least 1m); empty = only by hand.",
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

    def _clean_default(self, name):
        value = self.cleaned_data.get(name)
        return Source._meta.get_field(name).default if value is None else value

    def clean_page_limit(self):
        return self._clean_default("page_limit")

    def clean_crawl_delay_s(self):
        return self._clean_default("crawl_delay_s")

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
        for name in ("location", "include", "exclude", "sync_every"):  # as the check normalized them
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


# --- Sync runs -------------------------------------------------------------------------------------


def run_errors(run: SyncRun, limit: int | None = None):
    """A run's per-document errors as "path: message" lines (the first ``limit``), as HTML."""
    lines = []
    for entry in run.errors or []:
        document, error = str(entry.get("document", "")), str(entry.get("error", ""))
        lines.append(error if not document or error.startswith(f"{document}:") else f"{document}: {error}")
    shown = lines if limit is None else lines[:limit]
    html = format_html_join("", "<div>{}</div>", ((line,) for line in shown))
    if len(lines) > len(shown):
        html += format_html("<div>… and {} more</div>", len(lines) - len(shown))
    return html or "-"


def run_summary(run: SyncRun) -> str:
    """One sentence saying how a sync run stands: its status and counts, or why it failed."""
    counts = ", ".join(f"{n} {label}" for label, n in run.counts().items())
    if run.status == SyncRun.Status.DONE:
        return f"Sync of {run.source.name!r} done: {counts}."
    if run.status == SyncRun.Status.FAILED:
        return f"Sync of {run.source.name!r} failed: {run.error or counts}"
    return f"Sync of {run.source.name!r} is {run.get_status_display().lower()} (run {run.pk}); its counts appear on the source's page when it ends."


class SyncRunInline(admin.TabularInline):
    """The source's newest runs, read-only."""

    model = SyncRun
    fk_name = "source"
    fields = [
        "created_at",
        "trigger",
        "status",
        "new",
        "updated",
        "unchanged",
        "deleted",
        "failed",
        "error",
        "error_lines",
        "started_at",
        "finished_at",
    ]
    readonly_fields = fields
    ordering = ["-created_at"]
    extra = 0
    can_delete = False
    show_change_link = True
    verbose_name_plural = f"sync runs (newest {INLINE_RUNS})"

    def get_queryset(self, request):
        newest = SyncRun.objects.filter(source=OuterRef("source")).order_by("-created_at").values("pk")[:INLINE_RUNS]
        return super().get_queryset(request).filter(pk__in=Subquery(newest))

    def has_add_permission(self, request, obj=None):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    @admin.display(description="document errors")
    def error_lines(self, obj):
        return run_errors(obj, limit=20)


@admin.register(SyncRun)
class SyncRunAdmin(ReadOnlyAdminMixin, TenantScopedAdmin):
    list_display = ["__str__", "tenant", "source", "trigger", "status", "counts_line", "created_at", "finished_at"]
    list_filter = ["tenant", "status", ("source", admin.RelatedOnlyFieldListFilter), "trigger"]
    list_select_related = ["tenant", "source"]
    search_fields = ["source__name", "error"]
    date_hierarchy = "created_at"
    fields = [
        "tenant",
        "source",
        "trigger",
        "status",
        "new",
        "updated",
        "unchanged",
        "deleted",
        "failed",
        "error",
        "error_lines",
        "progress",
        "worker_id",
        "lease_expires_at",
        "attempts",
        "created_at",
        "started_at",
        "finished_at",
    ]
    readonly_fields = ["error_lines"]

    @admin.display(description="counts")
    def counts_line(self, obj):
        return ", ".join(f"{n} {label}" for label, n in obj.counts().items())

    @admin.display(description="document errors")
    def error_lines(self, obj):
        return run_errors(obj)


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
    readonly_fields = ["last_synced_at", "created_at"]
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
    ]
    inlines = [SyncRunInline]
    actions = ["sync_now"]

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

    def save_model(self, request, obj, form, change):
        super().save_model(request, obj, form, change)
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
        if request.method == "POST" and "_sync_now" in request.POST and object_id and response.status_code == 302:
            source = self.get_object(request, unquote(object_id))
            if source is not None:
                self._sync(request, source)
        return response

    def response_change(self, request, obj):
        response = super().response_change(request, obj)
        if "_sync_now" in request.POST:
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
class FolderGrantAdmin(admin.ModelAdmin):
    """The folders each tenant's folder and local git sources may read. Only superusers (the
    operator) see, add or revoke grants; a tenant admin has no way to grant themselves a folder."""

    form = FolderGrantForm
    list_display = ["tenant", "path", "allow_hard_links", "granted_by", "created_at"]
    list_filter = ["tenant"]
    search_fields = ["path", "tenant__slug"]

    def has_module_permission(self, request):
        return request.user.is_active and request.user.is_superuser

    def has_view_permission(self, request, obj=None):
        return request.user.is_active and request.user.is_superuser

    def has_add_permission(self, request):
        return request.user.is_active and request.user.is_superuser

    def has_change_permission(self, request, obj=None):
        return False  # a grant is added or revoked, never moved

    def has_delete_permission(self, request, obj=None):
        return request.user.is_active and request.user.is_superuser

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
