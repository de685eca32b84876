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

1. Seed: the postings of the highest-bound lexemes (up to ``SEED_POSTINGS`` of them) give the
   ``limit`` best chunks by partial score; their full scores (one primary-key probe per chunk and
   lexeme) have a least value theta, a lower bound on the exact top-k's last score.
2. Split: a lexeme's contribution to any chunk is at most its bound: weight x IDF x the
   term-frequency part at the lexeme's stored ``max_tf`` and ``min_length``
   (``knowledge_termstatistic``, kept as bounds by the triggers, migration 0012; the part grows
   with tf and falls with chunk length). Sorted by bound, the longest prefix whose bounds sum
   below theta is non-essential: a chunk matching only those lexemes scores below theta and
   cannot be in the top-k. They are the most common lexemes, with the longest postings.
3. Candidates: the chunks in the essential lexemes' postings whose partial score plus the
   non-essential bounds reaches theta. Partial scores are lower bounds of full scores, so the
   ``limit``-th best partial score raises theta (never above the top-k's last score) and
   removes more candidates before their non-essential contributions are added: a join of the
   remaining candidates with the non-essential postings, which PostgreSQL runs as primary-key
   probes per candidate (few candidates) or as a hash join over those postings (many; faster
   than thousands of probes: ``docs/scale.md``).

Every chunk of the exact top-k is a candidate and gets its exact score, so the ranking equals
the exhaustive one (``prune=False``) up to floating-point summation order (theta is lowered and
the stored bounds raised by a relative 1e-9 for that); ``tests/retrieval/test_lexical_pruning.py``
and ``benchmarks/scale.py`` (``lexical_exactness``) check it. Postings reads are index-only: the
primary key index carries tf, chunk length and ``is_current`` (migration 0012).
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
       s.term_count::float8 / GREATEST(s.chunk_count, 1) AS avgdl, ts.max_tf, ts.min_length
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
    "SELECT lexeme, weight, idf, bound"
    " FROM unnest(%(lexemes)s::text[], %(weights)s::float8[], %(idfs)s::float8[], %(bounds)s::float8[])"
    " AS t(lexeme, weight, idf, bound)"
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
    SELECT (
        SELECT SUM({impact})
        FROM q
        JOIN knowledge_posting p
          ON p.tenant_id = %(filter_tenant)s AND p.lexeme = q.lexeme AND p.chunk_id = seed.chunk_id
    ) AS score
    FROM seed
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
partials AS MATERIALIZED (
    SELECT p.chunk_id, SUM({impact}) AS partial
    FROM split q
    JOIN knowledge_posting p ON p.tenant_id = %(filter_tenant)s AND p.lexeme = q.lexeme
    WHERE NOT q.pruned AND {condition}
    GROUP BY p.chunk_id
    HAVING SUM({impact}) + (SELECT bound FROM rest) >= (SELECT t FROM theta)
),
theta2 AS MATERIALIZED (
    SELECT GREATEST((SELECT t FROM theta), coalesce((
        SELECT partial * (1 - 1e-9::float8) FROM partials ORDER BY partial DESC OFFSET %(limit)s - 1 LIMIT 1
    ), 0::float8)) AS t
)
SELECT c.chunk_id, c.partial + coalesce(SUM({impact}), 0::float8) AS score
FROM partials c
LEFT JOIN (split q JOIN knowledge_posting p ON p.tenant_id = %(filter_tenant)s AND p.lexeme = q.lexeme AND q.pruned)
  ON p.chunk_id = c.chunk_id
WHERE c.partial + (SELECT bound FROM rest) >= (SELECT t FROM theta2)
GROUP BY c.chunk_id, c.partial
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
    with read_connection().cursor() as cursor:
        cursor.execute(_TERMS.format(lexemes=lexemes).as_string(None), params)
        found = cursor.fetchall()
    if not found or limit <= 0:
        return []
    # (lexeme, weight, df, idf, bound), highest bound first: the seed takes the rarest lexemes.
    tight = where.as_of is None
    terms_found = sorted(
        (
            (lexeme, float(weight), df, float(idf), _bound(weight, idf, max_tf, min_length, avgdl, k1, b, tight))
            for lexeme, weight, df, idf, avgdl, max_tf, min_length in found
        ),
        key=lambda row: (-row[4], row[0]),
    )
    postings = sum(row[2] for row in terms_found)
    pruned = prune if prune is not None else postings > PRUNE_MIN_POSTINGS and len(terms_found) > 1
    params = {
        **where.params(),
        "lexemes": [row[0] for row in terms_found],
        "weights": [row[1] for row in terms_found],
        "idfs": [row[3] for row in terms_found],
        "bounds": [row[4] for row in terms_found],
        "avgdl": float(found[0][4]),
        "k1": float(k1),
        "b": float(b),
        "limit": int(limit),
    }
    if pruned:
        seed, read = [], 0
        for lexeme, _, df, _, _ in terms_found:
            if seed and read + df > SEED_POSTINGS:
                break
            seed.append(lexeme)
            read += df
        params["seed"] = seed
    # Postings are already the tenant's (primary key starts with tenant_id); the filter's own rule.
    condition = where.posting_condition("p")
    statement = (_PRUNED if pruned else _EXHAUSTIVE).format(query=_QUERY, impact=_IMPACT, condition=condition)
    with read_connection().cursor() as cursor:
        cursor.execute(statement.as_string(None), params)
        return [(row[0], float(row[1])) for row in cursor.fetchall()]


def _bound(weight, idf, max_tf, min_length, avgdl, k1, b, tight: bool) -> float:
    """An upper bound of one lexeme's BM25 contribution to any chunk the query may see.

    ``tight``: the term-frequency part at the lexeme's stored ``max_tf`` and ``min_length``
    (it grows with tf and falls with length, so no posting within those bounds scores more),
    raised by a relative 1e-9 against floating-point rounding. Only current chunks are within
    the stored bounds, so an ``as_of`` query (old versions) and unusual parameters (``b`` outside
    [0, 1], ``k1`` <= 0) use the saturation bound weight x IDF x (k1 + 1).
    """
    loose = float(weight) * float(idf) * (k1 + 1)
    if not tight or max_tf is None or min_length is None or not (0 <= b <= 1) or k1 <= 0 or avgdl <= 0:
        return loose
    norm = k1 * (1 - b + b * min_length / avgdl)
    return min(loose, float(weight) * float(idf) * (k1 + 1) * max_tf / (max_tf + norm) * (1 + 1e-9))


def query_lexemes(text: str) -> dict[str, int]:
    """The English-analysed lexemes of ``text`` with their occurrence counts (PostgreSQL's ``to_tsvector``)."""
    with read_connection().cursor() as cursor:
        cursor.execute(
            "SELECT lexeme, coalesce(array_length(positions, 1), 1) FROM unnest(to_tsvector('english', %s))",
            [text],
        )
        return {lexeme: int(count) for lexeme, count in cursor.fetchall()}
