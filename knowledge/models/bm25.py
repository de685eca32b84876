"""The BM25 index of chunks: term statistics, postings and each tenant's corpus statistics.

Imported by ``knowledge.models`` (so they belong to the ``knowledge`` app). Statement-level
triggers on ``knowledge_chunk`` keep all three exact (migrations 0003_bm25_postings, 0012);
application code never writes them.
"""

from __future__ import annotations

from django.db import models
from django.db.models import Q

from core.tenancy import TenantScopedQuerySet


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
