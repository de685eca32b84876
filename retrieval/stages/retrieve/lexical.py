"""Lexical retriever: Okapi BM25 computed exactly inside PostgreSQL.

Okapi BM25 (Robertson & Zaragoza 2009, "The Probabilistic Relevance Framework: BM25 and
Beyond") with Lucene's non-negative IDF, ln(1 + (N - df + 0.5) / (df + 0.5)). Term frequencies
and chunk lengths are generated columns of ``knowledge_chunk``; N, df and the average length
come from trigger-maintained statistics. Scoring walks the postings (tenant, lexeme, chunk ->
tf, length) of the query's lexemes: an inverted index.

A query is either text (analysed with PostgreSQL's English configuration: Snowball stemming,
stop words removed; each distinct lexeme weighs 1) or weighted lexemes ``{lexeme: weight}``
(query expansion: RM3, LLM OR-expansion), where each lexeme's BM25 contribution is multiplied by
its weight.
"""

from __future__ import annotations

from django.db import connection
from psycopg import sql

from retrieval.stages.retrieve.filters import RetrievalFilter
from retrieval.types import Ranking

_TEXT_LEXEMES = sql.SQL("SELECT DISTINCT lexeme, 1.0::float8 AS weight FROM unnest(to_tsvector('english', %(query)s))")
_WEIGHTED_LEXEMES = sql.SQL(
    "SELECT lexeme, max(weight) AS weight"
    " FROM unnest(%(lexemes)s::text[], %(weights)s::float8[]) AS t(lexeme, weight) GROUP BY lexeme"
)
# q is materialized so IDF is computed once per query lexeme, in float8 (not numeric).
_BM25 = sql.SQL(
    """WITH ql AS ({lexemes}),
q AS MATERIALIZED (
    SELECT ts.lexeme, ql.weight,
           ln(1.0::float8 + (s.chunk_count - ts.df + 0.5::float8) / (ts.df + 0.5::float8)) AS idf,
           s.term_count::float8 / GREATEST(s.chunk_count, 1) AS avgdl
    FROM ql
    JOIN knowledge_termstatistic ts ON ts.tenant_id = %(filter_tenant)s AND ts.lexeme = ql.lexeme AND ts.df > 0
    JOIN knowledge_corpusstatistic s ON s.tenant_id = %(filter_tenant)s
)
SELECT p.chunk_id,
       SUM(q.weight * q.idf * p.tf * (%(k1)s::float8 + 1)
           / (p.tf + %(k1)s::float8 * (1 - %(b)s::float8 + %(b)s::float8 * p.chunk_length / q.avgdl))) AS score
FROM q
JOIN knowledge_posting p ON p.tenant_id = %(filter_tenant)s AND p.lexeme = q.lexeme
WHERE {condition}
GROUP BY p.chunk_id
ORDER BY score DESC, p.chunk_id
LIMIT %(limit)s"""
)


def bm25_search(
    *,
    where: RetrievalFilter,
    limit: int,
    query: str | None = None,
    terms: dict[str, float] | None = None,
    k1: float = 1.2,
    b: float = 0.75,
) -> Ranking:
    """Chunk ids and BM25 scores of the chunks ``where`` allows that share a lexeme with the query.

    Give ``query`` (text) or ``terms`` (``{lexeme: weight}``, weights > 0; lexemes as PostgreSQL's
    English configuration produces them). ``k1`` is term-frequency saturation, ``b`` length
    normalization. Returns at most ``limit`` ``(chunk_id, score)`` pairs, best first (ties by id).
    ``ValueError`` when neither or both of ``query`` and ``terms`` are given.
    """
    if (query is None) == (terms is None):
        raise ValueError("give exactly one of query or terms")
    params = {**where.params(), "k1": float(k1), "b": float(b), "limit": int(limit)}
    if terms is not None:
        kept = {lexeme: float(w) for lexeme, w in terms.items() if lexeme and w > 0}
        if not kept:
            return []
        params["lexemes"], params["weights"] = list(kept), list(kept.values())
        lexemes = _WEIGHTED_LEXEMES
    else:
        params["query"] = query
        lexemes = _TEXT_LEXEMES
    # Postings are already the tenant's (primary key starts with tenant_id); the filter's own rule.
    condition = where.posting_condition("p")
    statement = _BM25.format(lexemes=lexemes, condition=condition).as_string(None)
    with connection.cursor() as cursor:
        cursor.execute(statement, params)
        return [(row[0], float(row[1])) for row in cursor.fetchall()]


def query_lexemes(text: str) -> dict[str, int]:
    """The English-analysed lexemes of ``text`` with their occurrence counts (PostgreSQL's ``to_tsvector``)."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT lexeme, coalesce(array_length(positions, 1), 1) FROM unnest(to_tsvector('english', %s))",
            [text],
        )
        return {lexeme: int(count) for lexeme, count in cursor.fetchall()}
