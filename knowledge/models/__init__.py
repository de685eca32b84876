"""Sources of a tenant (``core.Tenant``), their documents, document versions and chunks.

Every table holding tenant data reaches its tenant in one hop, and every read goes through
``TenantScopedQuerySet.for_tenant`` or the selectors, which call it.
"""

from __future__ import annotations

from datetime import timedelta

from django.conf import settings
from django.contrib.postgres.search import SearchVector
from django.db import models
from django.db.models import Q
from pgvector.django import VectorField

from core.secrets import EncryptedTextField
from core.tenancy import TenantScopedQuerySet


class VersionQuerySet(TenantScopedQuerySet):
    tenant_path = "document__tenant"


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


class Document(models.Model):
    """A document of a tenant, identified within the tenant by ``external_id`` (a path or URI).

    A live document has exactly one current version; a document deleted at its source
    (``deleted_at`` set by a sync) has none, and keeps its versions for ``as_of`` searches.
    """

    tenant = models.ForeignKey("core.Tenant", on_delete=models.CASCADE, related_name="documents")
    source = models.ForeignKey(Source, on_delete=models.CASCADE, related_name="documents")
    external_id = models.CharField(max_length=1000)
    uri = models.CharField(max_length=2000, blank=True)
    title = models.CharField(max_length=500)
    metadata = models.JSONField(default=dict, blank=True)
    # Sync (``knowledge.services.sync``): the connector's key for what the document was read from
    # (a file path, a URL) and its cheap change check (mtime and size, ETag, git blob id).
    sync_key = models.CharField(max_length=2000, blank=True)
    fingerprint = models.CharField(max_length=300, blank=True)
    deleted_at = models.DateTimeField(
        null=True,
        blank=True,
        help_text="When the document went away at its source: it has no current version from then on, "
        "and as_of searches before then still find it.",
    )
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    objects = TenantScopedQuerySet.as_manager()

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["tenant", "external_id"],
                name="document_unique_external_id_per_tenant",
            ),
            # The target of the versions' (document_id, tenant_id) foreign key (migration 0019),
            # which keeps a version in its document's tenant; a distributed table's key must hold
            # the tenant too (docs/scale.md).
            models.UniqueConstraint(fields=["id", "tenant"], name="document_unique_id_tenant"),
        ]
        indexes = [
            # Admin and API lists filter a tenant's documents by source.
            models.Index(fields=["tenant", "source"], name="document_tenant_source_idx"),
        ]

    def __str__(self) -> str:
        return self.title

    @property
    def is_deleted(self) -> bool:
        return self.deleted_at is not None


class DocumentVersion(models.Model):
    """One content state of a document. Exactly one version per document is current.

    A version whose content already exists in the tenant as another document's current
    version records that in ``duplicate_of`` and gets no chunks of its own. ``tenant`` is the
    document's tenant, copied onto the version when it is made (a foreign key
    ``(document_id, tenant_id)`` to the document's ``(id, tenant_id)``, migration 0019, refuses
    any other), so row-level security and a distributed database find a version's tenant on its
    own row (``docs/scale.md``).
    """

    tenant = models.ForeignKey("core.Tenant", on_delete=models.CASCADE, related_name="+")
    document = models.ForeignKey(Document, on_delete=models.CASCADE, related_name="versions")
    number = models.PositiveIntegerField()
    text = models.TextField()
    content_hash = models.CharField(max_length=64, help_text="SHA-256 of the normalized text, hex.")
    published_at = models.DateTimeField(null=True, blank=True)
    ingested_at = models.DateTimeField(auto_now_add=True)
    is_current = models.BooleanField(default=False)
    duplicate_of = models.ForeignKey(
        "self",
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="duplicates",
    )

    objects = VersionQuerySet.as_manager()

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["document", "number"], name="version_unique_number_per_document"),
            models.UniqueConstraint(
                fields=["document"],
                condition=Q(is_current=True),
                name="version_one_current_per_document",
            ),
            models.CheckConstraint(condition=Q(number__gte=1), name="version_number_positive"),
        ]
        indexes = [
            # Exact-duplicate lookup at ingestion: same hash among current versions.
            models.Index(
                fields=["content_hash"],
                condition=Q(is_current=True),
                name="version_current_hash_idx",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.document} v{self.number}"


# Per-document summaries (``knowledge.summaries``): a version's summary is a chunk of
# kind "summary" at this fixed ordinal, far past any body chunk, so packing windows and reading
# order never mix it with the body (``chunk_kind_ordinal``).
SUMMARY_ORDINAL = 1_000_000


def _english_tsvector():
    """Heading (weight A) and text (weight B) under PostgreSQL's English configuration."""
    return SearchVector("heading", weight="A", config="english") + SearchVector("text", weight="B", config="english")


class Chunk(models.Model):
    """A retrievable span of a version, with its embedding and BM25 term frequencies.

    ``embedding`` has no fixed dimension so a tenant can switch embedding models, and is NULL
    until the embedding task fills it when ingestion defers embedding (``KB_EMBED_QUEUE``);
    ``embedder`` records which model produced (or will produce) it, and each model gets its own partial HNSW index over
    ``embedding::vector(<dimensions>)`` (see ``knowledge.vector_index``).
    ``is_current`` copies the version's ``is_current`` (denormalized so default retrieval filters
    on the chunk row itself, through partial indexes): a new version's chunks become current and
    the old version's chunks stay, not current, in the same transaction (``docs/versions.md``).
    ``kind`` is ``body`` (a span of the version's text, ordinals 0..n-1) or ``summary`` (the
    version's summary, at ``SUMMARY_ORDINAL``, offsets 0..0; ``docs/summaries.md``).
    """

    class Kind(models.TextChoices):
        BODY = "body", "Body"
        SUMMARY = "summary", "Summary"

    tenant = models.ForeignKey("core.Tenant", on_delete=models.CASCADE, related_name="chunks")
    version = models.ForeignKey(DocumentVersion, on_delete=models.CASCADE, related_name="chunks")
    ordinal = models.PositiveIntegerField()
    heading = models.CharField(max_length=500, blank=True, help_text="Document title and section path.")
    text = models.TextField()
    token_count = models.PositiveIntegerField()
    char_start = models.PositiveIntegerField()
    char_end = models.PositiveIntegerField()
    embedder = models.CharField(max_length=200)
    # NULL only while the chunk waits for the embedding task (KB_EMBED_QUEUE set:
    # knowledge.services.embeddings); dense search skips such chunks, BM25 finds them meanwhile.
    embedding = VectorField(null=True)
    # BM25 inputs, derived from the English tsvector of heading and text (stemmed, stop words
    # removed): {lexeme: term frequency} and the chunk's length in lexemes. kb_term_freqs and
    # kb_term_count are SQL functions created by migrations 0002_bm25 and 0003_bm25_postings.
    term_freqs = models.GeneratedField(
        expression=models.Func(_english_tsvector(), function="kb_term_freqs"),
        output_field=models.JSONField(),
        db_persist=True,
    )
    term_count = models.GeneratedField(
        expression=models.Func(_english_tsvector(), function="kb_term_count"),
        output_field=models.IntegerField(),
        db_persist=True,
    )
    metadata = models.JSONField(default=dict, blank=True)
    is_current = models.BooleanField(default=True, db_default=True)
    kind = models.CharField(max_length=10, choices=Kind.choices, default=Kind.BODY, db_default=Kind.BODY)

    objects = TenantScopedQuerySet.as_manager()

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["version", "ordinal"], name="chunk_unique_ordinal_per_version"),
            # One summary per version (with the unique ordinal), never at a body chunk's ordinal.
            models.CheckConstraint(
                condition=Q(kind="body", ordinal__lt=SUMMARY_ORDINAL) | Q(kind="summary", ordinal=SUMMARY_ORDINAL),
                name="chunk_kind_ordinal",
            ),
            models.CheckConstraint(
                condition=Q(char_end__gte=models.F("char_start")),
                name="chunk_offsets_ordered",
            ),
        ]
        indexes = [
            # Tenant scoping of lexical candidates and per-tenant statistics.
            models.Index(fields=["tenant", "embedder"], name="chunk_tenant_embedder_idx"),
            # Default (current-only) exact dense scans of a tenant: old versions' chunks are skipped.
            models.Index(
                fields=["tenant", "embedder"], condition=Q(is_current=True), name="chunk_current_tenant_emb_idx"
            ),
            # Access rules: BM25 finds the chunks hidden from a user by their versions, index-only
            # (knowledge.access.AccessScope.denied_condition).
            models.Index(fields=["version"], include=["id"], name="chunk_version_incl_id_idx"),
            # Retrieval without summaries: BM25 skips the tenant's current summary chunks
            # (RetrievalFilter.posting_condition), one per document.
            models.Index(
                fields=["tenant"],
                include=["id"],
                condition=Q(kind="summary", is_current=True),
                name="chunk_summary_tenant_idx",
            ),
            # The embedding task finds a tenant's chunks still waiting for their embedding
            # (knowledge.services.embeddings.chunks_embed); empty unless KB_EMBED_QUEUE is set.
            models.Index(
                fields=["tenant", "id"], condition=Q(embedding__isnull=True), name="chunk_embedding_pending_idx"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.version} #{self.ordinal}"


class IngestionJob(models.Model):
    """An ingestion request (an API upload, or a file queued by ``manage.py ingest --async``) and its outcome.

    A job stores all of its documents or none (``knowledge.services.documents_ingest``): ``done``
    means ``result`` lists every document stored; ``failed`` means nothing was stored and
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
    ``{"document", "error"}`` for each document that failed alone; ``error`` says why a whole run
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


class TermStatistic(models.Model):
    """Document frequency of a lexeme among a tenant's current chunks (BM25's IDF input).

    Maintained by statement-level triggers on ``knowledge_chunk`` (migration 0003_bm25_postings),
    so it stays exact whatever path inserts or deletes chunks. Not edited by application code.
    """

    tenant = models.ForeignKey("core.Tenant", on_delete=models.CASCADE, related_name="+")
    lexeme = models.TextField()
    df = models.IntegerField()
    # Upper bounds over the lexeme's current postings, for MaxScore's per-lexeme score bound
    # (retrieval/stages/retrieve/lexical.py): raised on insert, left on delete (still bounds).
    max_tf = models.IntegerField(help_text="At least the largest tf of the lexeme in a current chunk.")
    min_length = models.IntegerField(help_text="At most the shortest current chunk (in lexemes) holding it.")

    objects = TenantScopedQuerySet.as_manager()

    class Meta:
        constraints = [
            # Also the lookup index of BM25 queries: (tenant_id, lexeme) = ANY(query lexemes).
            models.UniqueConstraint(fields=["tenant", "lexeme"], name="termstat_unique_lexeme_per_tenant"),
            models.CheckConstraint(condition=Q(df__gte=0), name="termstat_df_not_negative"),
        ]

    def __str__(self) -> str:
        return f"{self.lexeme} (df {self.df})"


class Posting(models.Model):
    """One lexeme of one chunk: the inverted index that BM25 scoring scans.

    Maintained by the statement-level triggers on ``knowledge_chunk`` (0003_bm25_postings), like
    ``TermStatistic``; the primary key (tenant, lexeme, chunk) is the index a query walks for each
    of its lexemes, and it INCLUDEs tf, chunk_length and is_current (migration 0012), so scoring
    reads the index alone. ``chunk_length`` copies ``Chunk.term_count`` so scoring never reads chunks.
    """

    pk = models.CompositePrimaryKey("tenant_id", "lexeme", "chunk_id")
    # No index of its own: the primary key's index starts with tenant_id.
    tenant = models.ForeignKey(
        "core.Tenant", on_delete=models.DO_NOTHING, db_constraint=False, db_index=False, related_name="+"
    )
    lexeme = models.TextField()
    # No index of its own either: postings are always reached by (tenant, lexeme[, chunk]), and a
    # chunk_id index lured the planner into reading every posting of a candidate chunk.
    chunk = models.ForeignKey(
        "Chunk", on_delete=models.DO_NOTHING, db_constraint=False, db_index=False, related_name="+"
    )
    tf = models.IntegerField()
    chunk_length = models.IntegerField()
    # Copies Chunk.is_current (the triggers keep it), so default BM25 skips old versions'
    # postings without reading chunks.
    is_current = models.BooleanField(default=True, db_default=True)

    objects = TenantScopedQuerySet.as_manager()

    def __str__(self) -> str:
        return f"{self.lexeme} in chunk {self.chunk_id} (tf {self.tf})"


class CorpusStatistic(models.Model):
    """A tenant's current chunk count and total length in lexemes (BM25's N and average length).

    Maintained by the same triggers as ``TermStatistic``.
    """

    tenant = models.OneToOneField("core.Tenant", on_delete=models.CASCADE, related_name="+")
    chunk_count = models.BigIntegerField(default=0)
    term_count = models.BigIntegerField(default=0)

    objects = TenantScopedQuerySet.as_manager()

    class Meta:
        constraints = [
            models.CheckConstraint(
                condition=Q(chunk_count__gte=0) & Q(term_count__gte=0), name="corpusstat_counts_not_negative"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.tenant_id}: {self.chunk_count} chunks"


# Near-duplicate records live in their own module; imported here so they belong to this app.
from knowledge.models.dedup import (  # noqa: E402, F401
    MinHashSignature,
    NearDuplicateCluster,
    NearDuplicateMember,
    NearDuplicatePair,
)

# Enrichment of chunks (keyphrases, questions) and its BM25 index, in their own module (docs/enrichment.md).
from knowledge.models.enrichment import (  # noqa: E402, F401
    ChunkEnrichment,
    EnrichmentCorpusStatistic,
    EnrichmentPosting,
    EnrichmentTermStatistic,
)

# ---- Groups and access rules (knowledge.access reads and writes them) -------------


class AccessGroup(models.Model):
    """A named set of members of one tenant, to grant access to restricted sources and documents.

    Members must belong to the group's tenant (checked by ``knowledge.access.access_group_save``
    and the admin form; a user who leaves the tenant no longer matters, see ``knowledge.access``).
    """

    tenant = models.ForeignKey("core.Tenant", on_delete=models.CASCADE, related_name="access_groups")
    name = models.CharField(max_length=200)
    members = models.ManyToManyField(settings.AUTH_USER_MODEL, blank=True, related_name="access_groups")
    created_at = models.DateTimeField(auto_now_add=True)

    objects = TenantScopedQuerySet.as_manager()

    class Meta:
        verbose_name = "group"
        constraints = [
            models.UniqueConstraint(fields=["tenant", "name"], name="accessgroup_unique_name_per_tenant"),
        ]

    def __str__(self) -> str:
        return f"{self.tenant}/{self.name}"


class AccessRule(models.Model):
    """One grant: ``source`` or ``document`` (exactly one) may be seen by ``group`` or ``user`` (exactly one).

    A source or document with no rule is public to its tenant; one with at least one rule is
    restricted to the groups and users its rules name. A document is visible when both its source
    and the document itself allow the reader (``knowledge.access``).
    """

    tenant = models.ForeignKey("core.Tenant", on_delete=models.CASCADE, related_name="access_rules")
    source = models.ForeignKey(Source, null=True, blank=True, on_delete=models.CASCADE, related_name="access_rules")
    document = models.ForeignKey(Document, null=True, blank=True, on_delete=models.CASCADE, related_name="access_rules")
    group = models.ForeignKey(AccessGroup, null=True, blank=True, on_delete=models.CASCADE, related_name="rules")
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.CASCADE, related_name="access_rules"
    )
    created_at = models.DateTimeField(auto_now_add=True)

    objects = TenantScopedQuerySet.as_manager()

    class Meta:
        verbose_name = "access rule"
        constraints = [
            models.CheckConstraint(
                condition=Q(source__isnull=False, document__isnull=True)
                | Q(source__isnull=True, document__isnull=False),
                name="accessrule_one_target",
            ),
            models.CheckConstraint(
                condition=Q(group__isnull=False, user__isnull=True) | Q(group__isnull=True, user__isnull=False),
                name="accessrule_one_grantee",
            ),
            models.UniqueConstraint(
                fields=["source", "document", "group", "user"], nulls_distinct=False, name="accessrule_unique_grant"
            ),
        ]
        indexes = [
            # retrieval's access condition and the document selectors: a tenant's rules, read whole.
            models.Index(fields=["tenant", "source", "document"], name="accessrule_tenant_target_idx"),
        ]

    def __str__(self) -> str:
        target = f"source {self.source}" if self.source_id else f"document {self.document}"
        grantee = f"group {self.group}" if self.group_id else f"user {self.user}"
        return f"{target} → {grantee}"


# Who may see service sources' documents at the source (knowledge.permissions), in their own module.
from knowledge.models.permissions import DocumentPermission, SourcePermissionGroup  # noqa: E402, F401
