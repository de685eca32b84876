"""Sources of a tenant (``core.Tenant``) and the folders the operator lets its folder sources read.

Imported by ``knowledge.models`` (so they belong to the ``knowledge`` app).
"""

from __future__ import annotations

from datetime import timedelta

from django.db import models
from django.db.models import Q

from core.secrets import EncryptedTextField
from core.tenancy import TenantScopedQuerySet


class Source(models.Model):
    """Where documents come from. ``reliability`` is in [0, 1]; ``half_life_days`` drives recency."""

    class Kind(models.TextChoices):
        # Filled by hand (``manage.py ingest``, uploads, dataset loaders): never synced.
        FILES = "files", "Files"
        UPLOAD = "upload", "Upload"
        DATASET = "dataset", "Dataset"
        # Connectors (``knowledge.connectors``): synced from ``location``, by hand or every ``sync_every``.
        FOLDER = "folder", "Folder"
        WEB = "web", "Web site"
        GIT = "git", "Git repository"
        # Service connectors (``knowledge.connectors.services``): a service's API, read with the
        # source's ``secret``, with who may see each document there (``knowledge.permissions``).
        SLACK = "slack", "Slack"
        CONFLUENCE = "confluence", "Confluence"
        GDRIVE = "gdrive", "Google Drive"
        GITHUB = "github", "GitHub"
        JIRA = "jira", "Jira"
        NOTION = "notion", "Notion"
        # The files members attach to their conversations (``knowledge.attachments``): one hidden
        # source per tenant, each document private to its member and searched only in its conversation.
        CONVERSATION = "conversation", "Conversation files"

    FILE_KINDS = (Kind.FOLDER, Kind.WEB, Kind.GIT)
    SERVICE_KINDS = (Kind.SLACK, Kind.CONFLUENCE, Kind.GDRIVE, Kind.GITHUB, Kind.JIRA, Kind.NOTION)
    SYNCED_KINDS = FILE_KINDS + SERVICE_KINDS

    tenant = models.ForeignKey("core.Tenant", on_delete=models.CASCADE, related_name="sources")
    name = models.CharField(max_length=200)
    kind = models.CharField(max_length=20, choices=Kind.choices, default=Kind.FILES)
    reliability = models.FloatField(default=1.0)
    half_life_days = models.FloatField(null=True, blank=True, help_text="Recency half-life; empty = no decay.")
    # Versions: how many non-current versions per document keep their chunks.
    versions_kept = models.PositiveIntegerField(
        null=True,
        blank=True,
        help_text="How many old versions per document keep their chunks (searchable with as_of); "
        "empty = all, 0 = none. Applied after each ingestion into the source.",
    )
    # Connector settings (``knowledge.connectors``; ignored by the kinds filled by hand).
    location = models.CharField(
        max_length=2000,
        blank=True,
        help_text="folder: a path the workers can read; web: a start URL or a sitemap.xml URL; "
        "git: a repository URL or path.",
    )
    branch = models.CharField(max_length=200, blank=True, help_text="git: the branch (empty = the default branch).")
    include = models.JSONField(
        default=list, blank=True, help_text="Globs of paths (folder, git) or URL paths (web) to read; empty = all."
    )
    exclude = models.JSONField(default=list, blank=True, help_text="Globs of paths or URL paths to skip.")
    text_format = models.CharField(
        max_length=10,
        blank=True,
        choices=[("rst", "reStructuredText"), ("md", "Markdown"), ("txt", "Plain text")],
        help_text="How .txt files are read (Django's docs are reST in .txt); empty = plain text.",
    )
    uri_prefix = models.CharField(
        max_length=1000, blank=True, help_text="folder, git: a document's URI is this prefix + its id."
    )
    page_limit = models.PositiveIntegerField(default=500, help_text="web: at most this many pages per sync.")
    crawl_delay_s = models.FloatField(
        default=1.0, help_text="web: seconds between two requests (robots.txt's Crawl-delay wins when longer)."
    )
    sync_every = models.DurationField(
        null=True, blank=True, help_text="Sync on a schedule this often (e.g. 1:00:00); empty = only by hand."
    )
    last_synced_at = models.DateTimeField(null=True, blank=True, help_text="When the last successful sync finished.")
    # Service connectors only.
    secret = EncryptedTextField(
        blank=True, help_text="The token or key the connector reads the service with; stored encrypted, never shown."
    )
    options = models.JSONField(
        default=dict, blank=True, help_text="The kind's options (e.g. Slack channels, Confluence spaces); see docs."
    )
    checkpoint = models.JSONField(
        default=dict,
        blank=True,
        help_text="Where the last content sync stopped; the next one reads what changed since.",
    )
    perm_every = models.DurationField(
        null=True, blank=True, help_text="Permission sync (readers, groups, deletions) this often; empty = the default."
    )
    last_perm_synced_at = models.DateTimeField(
        null=True, blank=True, help_text="When the last successful permission sync finished."
    )
    created_at = models.DateTimeField(auto_now_add=True)

    objects = TenantScopedQuerySet.as_manager()

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["tenant", "name"], name="source_unique_name_per_tenant"),
            models.CheckConstraint(
                condition=~Q(
                    kind__in=["folder", "web", "git", "slack", "confluence", "gdrive", "github", "jira", "notion"]
                )
                | ~Q(location=""),
                name="source_synced_kind_has_location",
            ),
            models.CheckConstraint(
                condition=Q(perm_every__isnull=True) | Q(perm_every__gte=timedelta(minutes=1)),
                name="source_perm_every_at_least_a_minute",
            ),
            models.CheckConstraint(condition=Q(crawl_delay_s__gte=0), name="source_crawl_delay_not_negative"),
            models.CheckConstraint(condition=Q(page_limit__gte=1), name="source_page_limit_positive"),
            models.CheckConstraint(
                condition=Q(sync_every__isnull=True) | Q(sync_every__gte=timedelta(minutes=1)),
                name="source_sync_every_at_least_a_minute",
            ),
            models.CheckConstraint(
                condition=Q(reliability__gte=0) & Q(reliability__lte=1),
                name="source_reliability_in_0_1",
            ),
            models.CheckConstraint(
                condition=Q(half_life_days__isnull=True) | Q(half_life_days__gt=0),
                name="source_half_life_positive",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.tenant}/{self.name}"

    @property
    def is_synced(self) -> bool:
        """Whether a connector keeps this source in sync (folder, web, git and the services)."""
        return self.kind in self.SYNCED_KINDS

    @property
    def is_service(self) -> bool:
        """Whether a service connector (Slack, Confluence, ...) reads this source, with permissions."""
        return self.kind in self.SERVICE_KINDS


class FolderGrant(models.Model):
    """A folder the operator lets one tenant's folder sources (and local git repositories) read
    (``knowledge.folder_grants``). ``path`` is absolute and resolved (no symbolic links);
    only operators (the superuser, ``manage.py folderroots``, ``manage.py source add``) grant.

    ``device`` and ``inode`` pin the very folder that was granted (``os.stat``'s ``st_dev`` and
    ``st_ino``, recorded when granted, or at the first sync of a grant made before they existed):
    a path later replaced by a link or by another folder is refused rather than followed.
    ``allow_hard_links`` (operators only) lets its sources read files with several hard links or
    on another file system than the folder's, which are otherwise skipped."""

    tenant = models.ForeignKey("core.Tenant", on_delete=models.CASCADE, related_name="folder_grants")
    path = models.CharField(max_length=2000)
    granted_by = models.CharField(max_length=200, blank=True, help_text="Who granted it: a superuser or the CLI.")
    created_at = models.DateTimeField(auto_now_add=True)
    # Unsigned 64-bit numbers, hence decimals (a bigint stops at 2**63).
    device = models.DecimalField(
        max_digits=20, decimal_places=0, null=True, blank=True, help_text="st_dev of the folder when granted."
    )
    inode = models.DecimalField(
        max_digits=20, decimal_places=0, null=True, blank=True, help_text="st_ino of the folder when granted."
    )
    allow_hard_links = models.BooleanField(
        default=False,
        help_text="Read files with several hard links, or on another file system, inside this folder "
        "(otherwise skipped: such a file can be another tenant's).",
    )

    objects = TenantScopedQuerySet.as_manager()

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["tenant", "path"], name="foldergrant_unique_path_per_tenant"),
            models.CheckConstraint(condition=Q(path__startswith="/"), name="foldergrant_path_absolute"),
        ]

    def __str__(self) -> str:
        return f"{self.tenant}: {self.path}"
