"""Tenants, their sources, documents, document versions and chunks.

Every table holding tenant data reaches its tenant in one hop, and every read goes through
``TenantScopedQuerySet.for_tenant`` or the selectors, which call it.
"""

from __future__ import annotations

from django.conf import settings
from django.contrib.postgres.search import SearchVector
from django.db import models
from django.db.models import Q
from pgvector.django import VectorField

from core.tenancy import TenantScopedQuerySet


class VersionQuerySet(TenantScopedQuerySet):
    tenant_path = "document__tenant"


class Tenant(models.Model):
    """A team: the unit of isolation. ``embedder`` names the embedding model its chunks use."""

    slug = models.SlugField(max_length=64, unique=True)
    name = models.CharField(max_length=200)
    embedder = models.CharField(
        max_length=200,
        default="local",
        help_text="'local' (all-MiniLM-L6-v2) or 'openai:<model>'. Changing it needs a re-embed.",
    )
    retrieval_config = models.JSONField(
        default=dict,
        blank=True,
        help_text='Overrides of retrieval defaults, e.g. {"fusion": "weighted", "dense_weight": 0.7}.',
    )
    created_at = models.DateTimeField(auto_now_add=True)

    def __str__(self) -> str:
        return self.slug


class Membership(models.Model):
    """A user's role in a tenant. A user may belong to several tenants, once each
    (``membership_unique_user_tenant``); which one a request acts in is
    ``knowledge.memberships.membership_for_request``."""

    class Role(models.TextChoices):
        """What a member may do: viewers ask; members also give feedback and keep their history
        (conversations); editors also upload and curate documents; admins and owners also manage
        sources, members and settings."""

        OWNER = "owner", "Owner"
        ADMIN = "admin", "Admin"
        EDITOR = "editor", "Editor"
        MEMBER = "member", "Member"
        VIEWER = "viewer", "Viewer"

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="memberships")
    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="memberships")
    role = models.CharField(max_length=10, choices=Role.choices, default=Role.MEMBER)

    objects = TenantScopedQuerySet.as_manager()

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["user", "tenant"], name="membership_unique_user_tenant"),
        ]

    def __str__(self) -> str:
        return f"{self.user} @ {self.tenant} ({self.role})"

    @property
    def can_edit(self) -> bool:
        """May upload, change and delete documents."""
        return self.role in (self.Role.OWNER, self.Role.ADMIN, self.Role.EDITOR)

    @property
    def can_participate(self) -> bool:
        """May give feedback and keep a history of conversations (every role but viewer)."""
        return self.role != self.Role.VIEWER


class Source(models.Model):
    """Where documents come from. ``reliability`` is in [0, 1]; ``half_life_days`` drives recency."""

    class Kind(models.TextChoices):
        FILES = "files", "Files"
        UPLOAD = "upload", "Upload"
        WEB = "web", "Web"
        DATASET = "dataset", "Dataset"

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="sources")
    name = models.CharField(max_length=200)
    kind = models.CharField(max_length=20, choices=Kind.choices, default=Kind.FILES)
    reliability = models.FloatField(default=1.0)
    half_life_days = models.FloatField(null=True, blank=True, help_text="Recency half-life; empty = no decay.")
    created_at = models.DateTimeField(auto_now_add=True)

    objects = TenantScopedQuerySet.as_manager()

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["tenant", "name"], name="source_unique_name_per_tenant"),
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


class Document(models.Model):
    """A document of a tenant, identified within the tenant by ``external_id`` (a path or URI)."""

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="documents")
    source = models.ForeignKey(Source, on_delete=models.CASCADE, related_name="documents")
    external_id = models.CharField(max_length=1000)
    uri = models.CharField(max_length=2000, blank=True)
    title = models.CharField(max_length=500)
    metadata = models.JSONField(default=dict, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    objects = TenantScopedQuerySet.as_manager()

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["tenant", "external_id"],
                name="document_unique_external_id_per_tenant",
            ),
        ]
        indexes = [
            # Admin and API lists filter a tenant's documents by source.
            models.Index(fields=["tenant", "source"], name="document_tenant_source_idx"),
        ]

    def __str__(self) -> str:
        return self.title


class DocumentVersion(models.Model):
    """One content state of a document. Exactly one version per document is current.

    A version whose content already exists in the tenant as another document's current
    version records that in ``duplicate_of`` and gets no chunks of its own.
    """

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


def _english_tsvector():
    """Heading (weight A) and text (weight B) under PostgreSQL's English configuration."""
    return SearchVector("heading", weight="A", config="english") + SearchVector("text", weight="B", config="english")


class Chunk(models.Model):
    """A retrievable span of a current version, with its embedding and BM25 term frequencies.

    ``embedding`` has no fixed dimension so a tenant can switch embedding models; ``embedder``
    records which model produced it, and each model gets its own partial HNSW index over
    ``embedding::vector(<dimensions>)`` (see ``knowledge.vector_index``).
    Chunks exist only for current versions: a new version replaces them in one transaction.
    """

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="chunks")
    version = models.ForeignKey(DocumentVersion, on_delete=models.CASCADE, related_name="chunks")
    ordinal = models.PositiveIntegerField()
    heading = models.CharField(max_length=500, blank=True, help_text="Document title and section path.")
    text = models.TextField()
    token_count = models.PositiveIntegerField()
    char_start = models.PositiveIntegerField()
    char_end = models.PositiveIntegerField()
    embedder = models.CharField(max_length=200)
    embedding = VectorField()
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

    objects = TenantScopedQuerySet.as_manager()

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["version", "ordinal"], name="chunk_unique_ordinal_per_version"),
            models.CheckConstraint(
                condition=Q(char_end__gte=models.F("char_start")),
                name="chunk_offsets_ordered",
            ),
        ]
        indexes = [
            # Tenant scoping of lexical candidates and per-tenant statistics.
            models.Index(fields=["tenant", "embedder"], name="chunk_tenant_embedder_idx"),
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

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="ingestion_jobs")
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


class TermStatistic(models.Model):
    """Document frequency of a lexeme among a tenant's chunks (BM25's IDF input).

    Maintained by statement-level triggers on ``knowledge_chunk`` (migration 0003_bm25_postings),
    so it stays exact whatever path inserts or deletes chunks. Not edited by application code.
    """

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="+")
    lexeme = models.TextField()
    df = models.IntegerField()

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
    of its lexemes. ``chunk_length`` copies ``Chunk.term_count`` so scoring never reads chunks.
    """

    pk = models.CompositePrimaryKey("tenant_id", "lexeme", "chunk_id")
    tenant = models.ForeignKey(Tenant, on_delete=models.DO_NOTHING, db_constraint=False, related_name="+")
    lexeme = models.TextField()
    chunk = models.ForeignKey("Chunk", on_delete=models.DO_NOTHING, db_constraint=False, related_name="+")
    tf = models.IntegerField()
    chunk_length = models.IntegerField()

    objects = TenantScopedQuerySet.as_manager()

    def __str__(self) -> str:
        return f"{self.lexeme} in chunk {self.chunk_id} (tf {self.tf})"


class CorpusStatistic(models.Model):
    """A tenant's chunk count and total chunk length in lexemes (BM25's N and average length).

    Maintained by the same triggers as ``TermStatistic``.
    """

    tenant = models.OneToOneField(Tenant, on_delete=models.CASCADE, related_name="+")
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


from knowledge.tokens import MembershipToken  # noqa: E402, F401  (a model of this app, kept in its own module)
