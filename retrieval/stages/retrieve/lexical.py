"""Lexical retriever: Okapi BM25 computed inside PostgreSQL, top-k with MaxScore pruning.

Okapi BM25 (Robertson & Zaragoza 2009, "The Probabilistic Relevance Framework: BM25 and
Beyond") with Lucene's non-negative IDF, ln(1 + (N - df + 0.5) / (df + 0.5)). Term frequencies
and chunk lengths are generated columns of ``knowledge_chunk``; N, df and the average length
come from trigger-maintained statistics. Scoring walks the postings (tenant, lexeme, chunk ->
tf, length) of the query's lexemes: an inverted index.

A query is either text (analysed with PostgreSQL's English configuration: Snowball stemming,
stop words removed; each distinct lexeme weighs 1) or weighted lexemes ``{lexeme: weight}``
(query expansion: RM3, LLM OR-expansion), where each lexeme's BM25 contribution is multiplied by
its weight.

Top-k is rank-safe MaxScore (Turtle & Flood 1995, "Query evaluation: strategies and
optimizations"; the essential/non-essential split as in Lucene's MaxScore and Mallia et al.
2019, "An experimental study of index compression and DAAT query processing methods"), done in
one SQL statement when the query's postings are long (``PRUNE_MIN_POSTINGS``):

1. Seed: the postings of the highest-IDF lexemes (up to ``SEED_POSTINGS`` of them) give the
   ``limit`` best chunks by partial score; their full scores (one primary-key probe per chunk and
   lexeme) have a least value theta, a lower bound on the exact top-k's last score.
2. Split: a lexeme's contribution to any chunk is below its upper bound weight x IDF x (k1 + 1)
   (BM25's term-frequency part saturates below k1 + 1). Sorted by bound, the longest prefix whose
   bounds sum below theta is non-essential: a chunk matching only those lexemes scores below theta
   and cannot be in the top-k. They are the most common lexemes, with the longest postings.
3. Candidates: the chunks in the essential lexemes' postings whose partial score plus the
   non-essential bounds reaches theta; their non-essential contributions come from primary-key
   probes, never from scanning those postings.

Every chunk of the exact top-k is a candidate and gets its exact score, so the ranking equals
the exhaustive one (``prune=False``) up to floating-point summation order (theta is lowered by a
relative 1e-9 for that); ``tests/retrieval/test_lexical_pruning.py`` and
``benchmarks/scale.py`` (``lexical_exactness``) check it.
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
# Queries whose lexemes' postings (document frequencies summed) are at most this long are scored
# exhaustively: below it pruning saves less than its extra probes cost (benchmarks/scale.py).
PRUNE_MIN_POSTINGS = 20_000
# The seed reads the postings of the highest-bound lexemes until it has read this many.
SEED_POSTINGS = 5_000

# The query's lexemes found in the tenant, with weight, document frequency, IDF and the tenant's
# average chunk length (one row per lexeme).
_TERMS = sql.SQL(
    """WITH ql AS ({lexemes})
SELECT ts.lexeme, ql.weight, ts.df,
       ln(1.0::float8 + (s.chunk_count - ts.df + 0.5::float8) / (ts.df + 0.5::float8)) AS idf,
       s.term_count::float8 / GREATEST(s.chunk_count, 1) AS avgdl
FROM ql
JOIN knowledge_termstatistic ts ON ts.tenant_id = %(filter_tenant)s AND ts.lexeme = ql.lexeme AND ts.df > 0
JOIN knowledge_corpusstatistic s ON s.tenant_id = %(filter_tenant)s"""
)
# One lexeme's BM25 contribution to one chunk: q (lexeme, weight, idf) x p (posting: tf, chunk_length).
_IMPACT = sql.SQL(
    "q.weight * q.idf * p.tf * (%(k1)s::float8 + 1)"
    " / (p.tf + %(k1)s::float8 * (1 - %(b)s::float8 + %(b)s::float8 * p.chunk_length / %(avgdl)s::float8))"
)
_QUERY = sql.SQL(
    "SELECT lexeme, weight, idf, weight * idf * (%(k1)s::float8 + 1) AS bound"
    " FROM unnest(%(lexemes)s::text[], %(weights)s::float8[], %(idfs)s::float8[]) AS t(lexeme, weight, idf)"
)
_EXHAUSTIVE = sql.SQL(
    """WITH q AS MATERIALIZED ({query})
SELECT p.chunk_id, SUM({impact}) AS score
FROM q
JOIN knowledge_posting p ON p.tenant_id = %(filter_tenant)s AND p.lexeme = q.lexeme
WHERE {condition}
GROUP BY p.chunk_id
ORDER BY score DESC, p.chunk_id
LIMIT %(limit)s"""
)
# MaxScore in one statement (module docstring): seed -> theta -> split -> candidates -> probes.
_PRUNED = sql.SQL(
    """WITH q AS MATERIALIZED ({query}),
seed AS MATERIALIZED (
    SELECT p.chunk_id
    FROM q
    JOIN knowledge_posting p ON p.tenant_id = %(filter_tenant)s AND p.lexeme = q.lexeme
    WHERE q.lexeme = ANY(%(seed)s::text[]) AND {condition}
    GROUP BY p.chunk_id
    ORDER BY SUM({impact}) DESC, p.chunk_id
    LIMIT %(limit)s
),
seed_scores AS (
    SELECT seed.chunk_id, SUM({impact}) AS score
    FROM seed CROSS JOIN q
    JOIN knowledge_posting p
      ON p.tenant_id = %(filter_tenant)s AND p.lexeme = q.lexeme AND p.chunk_id = seed.chunk_id
    GROUP BY seed.chunk_id
),
theta AS MATERIALIZED (
    SELECT CASE WHEN count(*) < %(limit)s THEN 0::float8 ELSE min(score) * (1 - 1e-9::float8) END AS t
    FROM seed_scores
),
split AS MATERIALIZED (
    SELECT q.lexeme, q.weight, q.idf, q.bound,
           sum(q.bound) OVER (ORDER BY q.bound, q.lexeme) < (SELECT t FROM theta) AS pruned
    FROM q
),
rest AS MATERIALIZED (
    SELECT coalesce(sum(bound) FILTER (WHERE pruned), 0::float8) AS bound FROM split
),
candidates AS MATERIALIZED (
    SELECT p.chunk_id, SUM({impact}) AS partial
    FROM split q
    JOIN knowledge_posting p ON p.tenant_id = %(filter_tenant)s AND p.lexeme = q.lexeme
    WHERE NOT q.pruned AND {condition}
    GROUP BY p.chunk_id
    HAVING SUM({impact}) + (SELECT bound FROM rest) >= (SELECT t FROM theta)
)
SELECT c.chunk_id,
       c.partial + coalesce((
           SELECT SUM({impact})
           FROM split q
           JOIN knowledge_posting p
             ON p.tenant_id = %(filter_tenant)s AND p.lexeme = q.lexeme AND p.chunk_id = c.chunk_id
           WHERE q.pruned), 0::float8) AS score
FROM candidates c
ORDER BY score DESC, c.chunk_id
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
    prune: bool | None = None,
) -> Ranking:
    """Chunk ids and BM25 scores of the chunks ``where`` allows that share a lexeme with the query.

    Give ``query`` (text) or ``terms`` (``{lexeme: weight}``, weights > 0; lexemes as PostgreSQL's
    English configuration produces them). ``k1`` is term-frequency saturation, ``b`` length
    normalization. Returns at most ``limit`` ``(chunk_id, score)`` pairs, best first (ties by id):
    the exact BM25 top-``limit``. ``prune``: ``None`` = MaxScore when the query's postings exceed
    ``PRUNE_MIN_POSTINGS`` (module docstring), ``True``/``False`` = always/never (tests,
    benchmarks). ``ValueError`` when neither or both of ``query`` and ``terms`` are given.
    """
    if (query is None) == (terms is None):
        raise ValueError("give exactly one of query or terms")
    params = where.params()
    if terms is not None:
        kept = {lexeme: float(w) for lexeme, w in terms.items() if lexeme and w > 0}
        if not kept:
            return []
        lexemes = _WEIGHTED_LEXEMES
        params = {**params, "lexemes": list(kept), "weights": list(kept.values())}
    else:
        lexemes = _TEXT_LEXEMES
        params = {**params, "query": query}
    with connection.cursor() as cursor:
        cursor.execute(_TERMS.format(lexemes=lexemes).as_string(None), params)
        found = cursor.fetchall()
    if not found or limit <= 0:
        return []
    # Highest upper bound first: the seed takes the rarest (most discriminating) lexemes.
    found.sort(key=lambda row: (-row[1] * row[3], row[0]))
    postings = sum(row[2] for row in found)
    pruned = prune if prune is not None else postings > PRUNE_MIN_POSTINGS and len(found) > 1
    params = {
        **where.params(),
        "lexemes": [row[0] for row in found],
        "weights": [float(row[1]) for row in found],
        "idfs": [float(row[3]) for row in found],
        "avgdl": float(found[0][4]),
        "k1": float(k1),
        "b": float(b),
        "limit": int(limit),
    }
    if pruned:
        seed, read = [], 0
        for lexeme, _, df, _, _ in found:
            if seed and read + df > SEED_POSTINGS:
                break
            seed.append(lexeme)
            read += df
        params["seed"] = seed
    # Postings are already the tenant's (primary key starts with tenant_id); the filter's own rule.
    condition = where.posting_condition("p")
    statement = (_PRUNED if pruned else _EXHAUSTIVE).format(query=_QUERY, impact=_IMPACT, condition=condition)
    with connection.cursor() as cursor:
        cursor.execute(statement.as_string(None), params)
        return [(row[0], float(row[1])) for row in cursor.fetchall()]


def query_lexemes(text: str) -> dict[str, int]:
    """The English-analysed lexemes of ``text`` with their occurrence counts (PostgreSQL's ``to_tsvector``)."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT lexeme, coalesce(array_length(positions, 1), 1) FROM unnest(to_tsvector('english', %s))",
            [text],
        )
        return {lexeme: int(count) for lexeme, count in cursor.fetchall()}
