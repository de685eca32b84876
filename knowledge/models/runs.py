"""The runs that fill sources: ingestion jobs (uploads, queued files) and connector syncs.

Imported by ``knowledge.models`` (so they belong to the ``knowledge`` app). Both hold a worker's
lease while they run and record their outcome on the row, which the admin, the API and the portal show.
"""

from __future__ import annotations

from django.db import models
from django.db.models import Q

from core.tenancy import TenantScopedQuerySet
from knowledge.models.sources import Source


class IngestionJob(models.Model):
    """An ingestion request (an API upload, or a file queued by ``manage.py ingest --async``) and its outcome.

    A job stores all of its documents or none (``knowledge.services.documents_ingest``): ``done``
    means ``result`` lists every document stored, and its ``notes`` what was read only in part
    (``"report.pdf: pages 11-40 not read (OCR budget 10 pages)"``); ``failed`` means nothing was stored and
    ``error`` says why. A worker running a job holds a lease (``worker_id`` until
    ``lease_expires_at``, renewed while it works); a job whose lease ran out (its worker died) is
    taken over by the next delivery of its task or by the recovery task. ``progress`` is
    ``{"stage", "documents", "chunks_total", "chunks_embedded"}`` while it runs.
    """

    class Status(models.TextChoices):
        PENDING = "pending", "Pending"
        RUNNING = "running", "Running"
        DONE = "done", "Done"
        FAILED = "failed", "Failed"

    tenant = models.ForeignKey("core.Tenant", on_delete=models.CASCADE, related_name="ingestion_jobs")
    source = models.ForeignKey(Source, on_delete=models.CASCADE, related_name="ingestion_jobs")
    file_name = models.CharField(max_length=500)
    stored_path = models.CharField(max_length=2000)
    options = models.JSONField(default=dict, blank=True)
    status = models.CharField(max_length=10, choices=Status.choices, default=Status.PENDING)
    result = models.JSONField(default=dict, blank=True)
    error = models.TextField(blank=True)
    progress = models.JSONField(default=dict, blank=True)
    worker_id = models.CharField(max_length=200, blank=True, help_text="The worker holding the lease (host/pid).")
    lease_expires_at = models.DateTimeField(null=True, blank=True)
    attempts = models.PositiveIntegerField(default=0, help_text="How many times a worker started the job.")
    created_at = models.DateTimeField(auto_now_add=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    objects = TenantScopedQuerySet.as_manager()

    class Meta:
        indexes = [
            # The API lists a tenant's recent jobs.
            models.Index(fields=["tenant", "-created_at"], name="job_tenant_created_idx"),
            # The recovery task looks for running jobs whose lease ran out.
            models.Index(
                fields=["lease_expires_at"],
                condition=Q(status="running"),
                name="job_running_lease_idx",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.file_name} ({self.status})"


class SyncRun(models.Model):
    """One sync of a connector source (``knowledge.services.sync``): its counts and errors.

    At most one run per source is pending or running (a database constraint). A worker running it
    holds a lease like an ingestion job; a run whose lease ran out is taken over. ``errors`` lists
    ``{"document", "error"}`` for each document that failed alone, and for each stored with pages
    not read (past the OCR budget; such a document does not count as failed); ``error`` says why a whole run
    failed (the source could not be reached), in which case nothing of the source changed.
    """

    class Status(models.TextChoices):
        PENDING = "pending", "Pending"
        RUNNING = "running", "Running"
        DONE = "done", "Done"
        FAILED = "failed", "Failed"

    class Trigger(models.TextChoices):
        MANUAL = "manual", "By hand"
        SCHEDULE = "schedule", "Schedule"

    class Scope(models.TextChoices):
        ALL = "all", "Content and permissions"
        CONTENT = "content", "Content"
        PERMISSIONS = "permissions", "Permissions"

    tenant = models.ForeignKey("core.Tenant", on_delete=models.CASCADE, related_name="sync_runs")
    source = models.ForeignKey(Source, on_delete=models.CASCADE, related_name="sync_runs")
    trigger = models.CharField(max_length=10, choices=Trigger.choices, default=Trigger.MANUAL)
    scope = models.CharField(
        max_length=12,
        choices=Scope.choices,
        default=Scope.ALL,
        db_default=Scope.ALL,
        help_text="Service sources: content (what changed), permissions (readers, groups, deletions) or both.",
    )
    status = models.CharField(max_length=10, choices=Status.choices, default=Status.PENDING)
    permissions = models.JSONField(
        default=dict,
        blank=True,
        help_text="Service sources' permission sync: groups, documents restricted, public, unreadable, rules changed.",
    )
    new = models.PositiveIntegerField(default=0)
    updated = models.PositiveIntegerField(default=0)
    unchanged = models.PositiveIntegerField(default=0)
    deleted = models.PositiveIntegerField(default=0)
    failed = models.PositiveIntegerField(default=0)
    errors = models.JSONField(default=list, blank=True)
    error = models.TextField(blank=True)
    progress = models.JSONField(default=dict, blank=True)
    worker_id = models.CharField(max_length=200, blank=True)
    lease_expires_at = models.DateTimeField(null=True, blank=True)
    attempts = models.PositiveIntegerField(default=0)
    created_at = models.DateTimeField(auto_now_add=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    objects = TenantScopedQuerySet.as_manager()

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["source"],
                condition=Q(status__in=["pending", "running"]),
                name="syncrun_one_active_per_source",
            ),
        ]
        indexes = [
            models.Index(fields=["source", "-created_at"], name="syncrun_source_created_idx"),
            models.Index(fields=["lease_expires_at"], condition=Q(status="running"), name="syncrun_running_lease_idx"),
        ]

    def __str__(self) -> str:
        return f"{self.source} sync {self.pk} ({self.status})"

    def counts(self) -> dict[str, int]:
        """``{"new", "updated", "unchanged", "deleted", "failed"}``."""
        return {k: getattr(self, k) for k in ("new", "updated", "unchanged", "deleted", "failed")}
