"""Django admin of sync runs: the read-only run admin, the newest runs on a source's page, and
the lines that describe a run (its counts, its documents' errors, a service source's last content
and permission syncs). Registered when ``knowledge.admin_sources`` imports it."""

from __future__ import annotations

from django.contrib import admin
from django.db.models import OuterRef, Subquery
from django.utils import timezone
from django.utils.html import format_html, format_html_join

from core.admin import ReadOnlyAdminMixin, TenantScopedAdmin
from knowledge.models import Source, SyncRun

INLINE_RUNS = 20  # newest runs listed on a source's page
PERMISSION_COUNTS = (
    "groups",
    "public",
    "restricted",
    "unreadable",
    "rules_added",
    "rules_removed",
    "source_users_not_members",
)


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
        "scope",
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
    list_display = [
        "__str__",
        "tenant",
        "source",
        "trigger",
        "scope",
        "status",
        "counts_line",
        "created_at",
        "finished_at",
    ]
    list_filter = ["tenant", "status", ("source", admin.RelatedOnlyFieldListFilter), "trigger", "scope"]
    list_select_related = ["tenant", "source"]
    search_fields = ["source__name", "error"]
    date_hierarchy = "created_at"
    fields = [
        "tenant",
        "source",
        "trigger",
        "scope",
        "status",
        "new",
        "updated",
        "unchanged",
        "deleted",
        "failed",
        "error",
        "error_lines",
        "permissions_line",
        "progress",
        "worker_id",
        "lease_expires_at",
        "attempts",
        "created_at",
        "started_at",
        "finished_at",
    ]
    readonly_fields = ["error_lines", "permissions_line"]

    @admin.display(description="counts")
    def counts_line(self, obj):
        return ", ".join(f"{n} {label}" for label, n in obj.counts().items())

    @admin.display(description="document errors")
    def error_lines(self, obj):
        return run_errors(obj)

    @admin.display(description="permissions")
    def permissions_line(self, obj):
        return permission_counts_line(obj.permissions) if obj.permissions else "-"


# --- A service source's last syncs -----------------------------------------------------------------


def last_run_of(source: Source, *scopes: str) -> SyncRun | None:
    """The newest run of ``source`` that synced one of ``scopes`` (any status), or ``None``."""
    return SyncRun.objects.filter(source=source, scope__in=scopes).order_by("-created_at").first()


def _run_head(run: SyncRun) -> str:
    when = run.finished_at or run.started_at or run.created_at
    return f"{run.get_status_display()} ({timezone.localtime(when):%Y-%m-%d %H:%M}, run {run.pk})"


def content_sync_html(run: SyncRun | None):
    """A content sync as HTML: status and time, counts, why it failed, and its documents' errors."""
    if run is None:
        return "never"
    counts = ", ".join(f"{n} {label}" for label, n in run.counts().items())
    lines = format_html("<div>{}: {}</div>", _run_head(run), counts)
    if run.error:
        lines += format_html("<div>Failed: {}</div>", run.error)
    if run.errors:
        lines += format_html("<div>{} document errors:</div>{}", len(run.errors), run_errors(run, limit=20))
    return lines


def permission_counts_line(counts: dict) -> str:
    """A permission sync's counts (``SyncRun.permissions``) in one sentence."""
    c = {key: counts.get(key, 0) for key in PERMISSION_COUNTS}
    return (
        f"{c['groups']} groups; {c['public']} documents for the whole tenant, {c['restricted']} restricted, "
        f"{c['unreadable']} admins only (permissions unreadable); {c['rules_added']} rules added, "
        f"{c['rules_removed']} removed; {c['source_users_not_members']} source users are not members yet."
    )


def permission_sync_html(run: SyncRun | None):
    """A permission sync as HTML: status and time, its counts, and why it failed."""
    if run is None:
        return "never"
    lines = format_html("<div>{}</div>", _run_head(run))
    if run.permissions:
        lines += format_html("<div>{}</div>", permission_counts_line(run.permissions))
    if run.error:
        lines += format_html("<div>Failed: {}</div>", run.error)
    return lines
