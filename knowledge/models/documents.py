"""Documents of a source, their versions (content states) and the versions' chunks.

Imported by ``knowledge.models`` (so they belong to the ``knowledge`` app). A live document has
exactly one current version; each version's chunks carry its embedding and BM25 inputs.
"""

from __future__ import annotations

from django.contrib.postgres.search import SearchVector
from django.db import models
from django.db.models import Q
from pgvector.django import VectorField

from core.tenancy import TenantScopedQuerySet
from knowledge.models.sources import Source


class VersionQuerySet(TenantScopedQuerySet):
    """Versions, scoped to a tenant through their document (migration 0019 put the tenant on the row too)."""

    tenant_path = "document__tenant"


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
    # The kept original file's size (knowledge.originals: PDFs only; 0 = none kept), counted in stored_bytes.
    original_bytes = models.PositiveBigIntegerField(default=0)

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
