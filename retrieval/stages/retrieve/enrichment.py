"""BM25 over the chunks' enrichment field (keyphrases, questions, entities), added down-weighted to the body's.

The field (``knowledge.enrichment``) has its own postings and statistics (document frequency, N
and average length over the tenant's enriched chunks, current or not), so its Okapi BM25 (same
formula and IDF as ``lexical``: Robertson & Zaragoza 2009) is computed apart, by this module's
SQL, and combined with the body's:

    score(chunk) = BM25_body(chunk) + w x BM25_enrichment(chunk)

over the union of the two retrievers' top lists, ``w`` being the tenant's ``enrichment_weight``.
This is a linear combination of per-field BM25 scores, not BM25F (Robertson, Zaragoza & Taylor
2004, "Simple BM25 extension to multiple weighted fields"), which would add the fields' weighted
term frequencies before saturating them; a linear sum saturates each field on its own, which
the BM25F paper shows over-rewards a term matched in both fields. Kept because the body's BM25
(``lexical``, MaxScore top-k) is a separate, pruned query, and because at a small ``w`` the field
acts as a tie-breaker among the body's matches plus a way in for chunks whose questions use the
query's words. A chunk found by the field alone is scored with body 0 (its body score, if any, is
below the body list's last), a lower bound; every body candidate gets its exact field score.

The ``RetrievalFilter`` (current versions or ``as_of``, sources, access rules) applies as the
body's BM25 applies it (``RetrievalFilter.posting_condition``): by default the postings' own
``is_current`` copy (migration ``knowledge 0016``), so the field is scored from the postings'
covering index without reading a chunk row; a narrowed filter adds the chunk subquery.
"""

from __future__ import annotations

from psycopg import sql

from core.replicas import read_connection
from retrieval.filters import RetrievalFilter
from retrieval.types import Ranking

_TEXT_LEXEMES = sql.SQL("SELECT DISTINCT lexeme, 1.0::float8 AS weight FROM unnest(to_tsvector('english', %(query)s))")
_WEIGHTED_LEXEMES = sql.SQL(
    "SELECT lexeme, max(weight) AS weight"
    " FROM unnest(%(lexemes)s::text[], %(weights)s::float8[]) AS t(lexeme, weight) GROUP BY lexeme"
)
# Exhaustive: the field's postings are short (a dozen lexemes per chunk), so every matching
# chunk is scored; the top ``limit`` and the scores of the ``also`` chunks are returned.
_SEARCH = sql.SQL(
    """WITH ql AS ({lexemes}),
q AS MATERIALIZED (
    SELECT ts.lexeme, ql.weight,
           ln(1.0::float8 + (s.chunk_count - ts.df + 0.5::float8) / (ts.df + 0.5::float8)) AS idf,
           s.term_count::float8 / GREATEST(s.chunk_count, 1) AS avgdl
    FROM ql
    JOIN knowledge_enrichmenttermstatistic ts
      ON ts.tenant_id = %(filter_tenant)s AND ts.lexeme = ql.lexeme AND ts.df > 0
    JOIN knowledge_enrichmentcorpusstatistic s ON s.tenant_id = %(filter_tenant)s
),
scored AS MATERIALIZED (
    SELECT p.chunk_id,
           SUM(q.weight * q.idf * p.tf * (%(k1)s::float8 + 1)
               / (p.tf + %(k1)s::float8 * (1 - %(b)s::float8 + %(b)s::float8 * p.field_length / q.avgdl))) AS score
    FROM q
    JOIN knowledge_enrichmentposting p ON p.tenant_id = %(filter_tenant)s AND p.lexeme = q.lexeme
    WHERE {condition}
    GROUP BY p.chunk_id
)
(SELECT chunk_id, score FROM scored ORDER BY score DESC, chunk_id LIMIT %(limit)s)
UNION
(SELECT chunk_id, score FROM scored WHERE chunk_id = ANY(%(also)s::bigint[]))"""
)


def enrichment_bm25_search(
    *,
    where: RetrievalFilter,
    limit: int,
    query: str | None = None,
    terms: dict[str, float] | None = None,
    also: list[int] | tuple[int, ...] = (),
    k1: float = 1.2,
    b: float = 0.75,
) -> Ranking:
    """BM25 of the enrichment field: the top ``limit`` chunks ``where`` allows, plus the chunks of
    ``also`` that match at all, as ``(chunk_id, score)`` best first (ties by id).

    ``query`` (text, English analysis) or ``terms`` (``{lexeme: weight}``), as
    ``lexical.bm25_search`` takes them; ``ValueError`` when neither or both are given. A chunk
    of ``also`` missing from the result has field score 0.
    """
    if (query is None) == (terms is None):
        raise ValueError("give exactly one of query or terms")
    params = {**where.params(), "limit": int(limit), "also": list(also), "k1": float(k1), "b": float(b)}
    if terms is not None:
        kept = {lexeme: float(w) for lexeme, w in terms.items() if lexeme and w > 0}
        if not kept:
            return []
        lexemes = _WEIGHTED_LEXEMES
        params.update(lexemes=list(kept), weights=list(kept.values()))
    else:
        lexemes = _TEXT_LEXEMES
        params["query"] = query
    statement = _SEARCH.format(lexemes=lexemes, condition=where.posting_condition("p"))
    with read_connection().cursor() as cursor:
        cursor.execute(statement.as_string(None), params)
        rows = cursor.fetchall()
    return sorted(((row[0], float(row[1])) for row in rows), key=lambda pair: (-pair[1], pair[0]))


def fields_combine(body: Ranking, field: Ranking, *, weight: float, limit: int) -> tuple[Ranking, dict[int, dict]]:
    """``body + weight x field`` over the union of the two rankings: the top ``limit`` and, per
    chunk, its parts ``{"body": score, "enrichment": score}`` (rounded to 6 places).

    A chunk missing from one ranking scores 0 there (module docstring). Ties keep the body's order.
    """
    body_scores = dict(body)
    field_scores = dict(field)
    order: dict[int, int] = {}
    for chunk_id, _ in (*body, *field):
        order.setdefault(chunk_id, len(order))
    combined = {
        chunk_id: body_scores.get(chunk_id, 0.0) + weight * field_scores.get(chunk_id, 0.0)
        for chunk_id in {**body_scores, **field_scores}
    }
    ranking = sorted(combined.items(), key=lambda pair: (-pair[1], order[pair[0]]))[:limit]
    parts = {
        chunk_id: {
            "body": round(body_scores.get(chunk_id, 0.0), 6),
            "enrichment": round(field_scores.get(chunk_id, 0.0), 6),
        }
        for chunk_id, _ in ranking
    }
    return ranking, parts
