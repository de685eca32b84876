"""Enrichment records: a chunk's keyphrases, questions and entities, and the BM25 index of that field.

Imported by ``knowledge.models`` (so they belong to the ``knowledge`` app; migration
``0013_enrichment``). ``ChunkEnrichment`` is one row per enriched chunk; ``EnrichmentPosting``
the field's inverted index (written by ``knowledge.enrichment.services`` right after the row);
``EnrichmentTermStatistic`` and ``EnrichmentCorpusStatistic`` its BM25 statistics, kept exact by
statement-level triggers on the postings. A deleted chunk takes its enrichment and postings with
it (``ON DELETE CASCADE`` foreign keys added by the migration), and the triggers take them out of
the statistics.
"""

from __future__ import annotations

from django.db import models
from django.db.models import Q

from core.tenancy import TenantScopedQuerySet


class ChunkEnrichment(models.Model):
    """The enrichment field of one chunk: ``keyphrases``, ``questions`` and ``entities`` (lists of strings).

    ``method`` says what produced them (``"yake"``, ``"+ner"`` with entities, ``"+llm:<model>"``
    with questions: ``"yake+ner+llm:<model>"``); ``questions_error`` records why an LLM was
    configured but gave no questions, ``entities_error`` why entities were asked for but could not
    be extracted (the chunk then keeps the rest). ``term_count`` is the field's length in lexemes
    (English analysis of keyphrases, questions and entities), BM25's field length.
    """

    # The foreign key (ON DELETE CASCADE) is created by the migration: the database removes the
    # enrichment with its chunk, whatever deletes the chunk.
    chunk = models.OneToOneField(
        "knowledge.Chunk",
        primary_key=True,
        on_delete=models.DO_NOTHING,
        db_constraint=False,
        related_name="enrichment",
    )
    tenant = models.ForeignKey("core.Tenant", on_delete=models.CASCADE, related_name="+")
    keyphrases = models.JSONField(default=list, blank=True)
    questions = models.JSONField(default=list, blank=True)
    method = models.CharField(max_length=200)
    questions_error = models.CharField(max_length=500, blank=True)
    # Named entities (spaCy's small English pipeline, ``knowledge.enrichment.entities``) when the
    # tenant's ``enrichment_entities`` switch is on.
    entities = models.JSONField(default=list, blank=True)
    entities_error = models.CharField(max_length=500, blank=True)
    term_count = models.IntegerField(default=0)
    created_at = models.DateTimeField(auto_now_add=True)

    objects = TenantScopedQuerySet.as_manager()

    class Meta:
        constraints = [
            models.CheckConstraint(condition=Q(term_count__gte=0), name="enrichment_term_count_not_negative"),
        ]
        indexes = [
            # The enrichment task finds a tenant's chunks that have no enrichment yet.
            models.Index(fields=["tenant"], name="enrichment_tenant_idx"),
        ]

    def __str__(self) -> str:
        return f"Enrichment of chunk {self.chunk_id}"

    @property
    def field_text(self) -> str:
        """The text indexed as the enrichment field: keyphrases, questions, then entities, one per line."""
        return field_text(self.keyphrases, self.questions, self.entities)


def field_text(keyphrases: list[str], questions: list[str], entities: list[str] = ()) -> str:
    """The enrichment field's text: keyphrases, questions, then entities, one per line."""
    return "\n".join([*keyphrases, *questions, *entities])


class EnrichmentPosting(models.Model):
    """One lexeme of one chunk's enrichment field: the field's inverted index (BM25).

    The primary key (tenant, lexeme, chunk) is the index a query walks per lexeme; it INCLUDEs
    tf, field_length and is_current (migration 0016), so default scoring reads the index alone
    and never joins the chunk table. ``field_length`` copies ``ChunkEnrichment.term_count``;
    ``is_current`` copies ``Chunk.is_current`` (set from the locked chunk row on insert, kept by
    the trigger ``chunk_enrichment_current`` on every chunk update). Removed with its
    enrichment row (foreign key ``ON DELETE CASCADE``, created by the migration).
    """

    pk = models.CompositePrimaryKey("tenant_id", "lexeme", "chunk_id")
    tenant = models.ForeignKey(
        "core.Tenant", on_delete=models.DO_NOTHING, db_constraint=False, db_index=False, related_name="+"
    )
    lexeme = models.TextField()
    chunk = models.ForeignKey(
        ChunkEnrichment, on_delete=models.DO_NOTHING, db_constraint=False, related_name="postings"
    )
    tf = models.IntegerField()
    field_length = models.IntegerField()
    # Copies Chunk.is_current, so the field's default BM25 skips old versions' chunks without
    # reading the chunk table (as ``Posting.is_current`` does for the body).
    is_current = models.BooleanField(default=True, db_default=True)

    objects = TenantScopedQuerySet.as_manager()

    class Meta:
        indexes = [
            # The cascade from a deleted enrichment (or chunk) finds its postings.
            models.Index(fields=["chunk"], name="enrichposting_chunk_idx"),
        ]

    def __str__(self) -> str:
        return f"{self.lexeme} in the enrichment of chunk {self.chunk_id} (tf {self.tf})"


class EnrichmentTermStatistic(models.Model):
    """Document frequency of a lexeme in a tenant's enrichment fields (the field's IDF input).

    Kept by the triggers on ``knowledge_enrichmentposting`` (migration 0013); never written by
    application code. Counts every enriched chunk of the tenant, current or not.
    """

    pk = models.CompositePrimaryKey("tenant_id", "lexeme")
    tenant = models.ForeignKey("core.Tenant", on_delete=models.CASCADE, related_name="+")
    lexeme = models.TextField()
    df = models.IntegerField()

    objects = TenantScopedQuerySet.as_manager()

    class Meta:
        constraints = [
            models.CheckConstraint(condition=Q(df__gte=0), name="enrichtermstat_df_not_negative"),
        ]

    def __str__(self) -> str:
        return f"{self.lexeme} (enrichment df {self.df})"


class EnrichmentCorpusStatistic(models.Model):
    """How many of a tenant's chunks have a non-empty enrichment field, and their total length
    in lexemes (the field's N and average length). Kept by the same triggers."""

    tenant = models.OneToOneField("core.Tenant", primary_key=True, on_delete=models.CASCADE, related_name="+")
    chunk_count = models.BigIntegerField(default=0)
    term_count = models.BigIntegerField(default=0)

    objects = TenantScopedQuerySet.as_manager()

    class Meta:
        constraints = [
            models.CheckConstraint(
                condition=Q(chunk_count__gte=0) & Q(term_count__gte=0), name="enrichcorpusstat_not_negative"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.tenant_id}: {self.chunk_count} enriched chunks"
