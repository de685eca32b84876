"""Hybrid chunk search: lexical (PostgreSQL full text) and dense (pgvector HNSW) candidates, fused.

``chunk_search`` is the one entry point. Every SQL statement here filters on
``knowledge_chunk.tenant_id``, and results are re-fetched through
``Chunk.objects.for_tenant``: no path returns another tenant's chunk.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path

from django.conf import settings
from django.db import connection, transaction

from knowledge.embedders import get_embedder
from knowledge.errors import InvalidInput
from knowledge.models import Chunk, Tenant
from retrieval import fusion

MODES = ("hybrid", "lexical", "dense")
FUSIONS = ("rrf", "weighted", "tm2c2", "dbsf")
MAX_QUERY_CHARS = 2000


@dataclass
class SearchConfig:
    """Retrieval settings; ``KB_FUSION`` and then a tenant's ``retrieval_config`` override the defaults.

    ``fusion`` is one of ``FUSIONS``; ``candidates`` is how many chunks each side brings. The
    defaults (min-max weighted fusion, 0.7 dense / 0.3 BM25, k1 = 1.2, b = 0.75) won on all three
    shared datasets (``benchmarks/retrieval_quality.py --variants``; README, "Retrieval quality").
    """

    fusion: str = "weighted"
    rrf_k: int = 60
    dense_weight: float = 0.7
    lexical_weight: float = 0.3
    candidates: int = 100
    ef_search: int = 100
    bm25_k1: float = 1.2
    bm25_b: float = 0.75

    @classmethod
    def for_tenant(cls, tenant: Tenant, **overrides) -> SearchConfig:
        values = {"fusion": settings.KB_FUSION, **(tenant.retrieval_config or {}), **overrides}
        known = {k: v for k, v in values.items() if k in cls.__dataclass_fields__ and v is not None}
        config = cls(**known)
        if config.fusion not in FUSIONS:
            raise InvalidInput(f"Unknown fusion {config.fusion!r}; use one of {', '.join(FUSIONS)}.")
        return config


@dataclass
class SearchResult:
    """One ranked chunk with its fused score and each component's score and rank (1-based)."""

    chunk: Chunk
    score: float
    rank: int
    components: dict[str, dict[str, float | int]] = field(default_factory=dict)

    def as_dict(self, *, with_text: bool = True) -> dict:
        version = self.chunk.version
        document = version.document
        data = {
            "rank": self.rank,
            "document": document.external_id,
            "document_id": document.pk,
            "title": document.title,
            "uri": document.uri,
            "source": document.source.name,
            "version": version.number,
            "chunk": self.chunk.ordinal,
            "chunk_id": self.chunk.pk,
            "heading": self.chunk.heading,
            "score": round(self.score, 6),
            "components": self.components,
        }
        if with_text:
            data["text"] = self.chunk.text
        return data


@dataclass
class SearchResponse:
    results: list[SearchResult]
    timings_ms: dict[str, float]
    mode: str
    config: SearchConfig


def _source_filter(tenant: Tenant, source_ids: list[int] | None) -> tuple[str, list]:
    """SQL (and params) keeping only chunks of documents in ``source_ids``; empty when none given."""
    if not source_ids:
        return "", []
    return (
        " AND c.version_id IN (SELECT v.id FROM knowledge_documentversion v JOIN knowledge_document d"
        " ON d.id = v.document_id WHERE d.tenant_id = %s AND d.source_id = ANY(%s))",
        [tenant.pk, list(source_ids)],
    )


# Okapi BM25 (Robertson & Zaragoza 2009, "The Probabilistic Relevance Framework") with Lucene's
# non-negative IDF, ln(1 + (N - df + 0.5) / (df + 0.5)), computed exactly inside PostgreSQL:
# term frequencies and chunk lengths are generated columns of knowledge_chunk; N, df and the
# average length come from trigger-maintained statistics (knowledge/bm25.sql). Scoring walks the
# postings (tenant, lexeme, chunk -> tf, length) of the query's lexemes: an inverted index.
_BM25_SQL = (Path(__file__).resolve().parent / "bm25_search.sql").read_text()


def lexical_candidates(
    *,
    tenant: Tenant,
    query: str,
    limit: int,
    source_ids: list[int] | None = None,
    k1: float = 1.2,
    b: float = 0.75,
) -> list[tuple[int, float]]:
    """Chunk ids and BM25 scores of the tenant's chunks sharing a lexeme with ``query``, best first.

    Lexemes come from PostgreSQL's English configuration (Snowball stemming, stop words removed).
    ``k1`` (term-frequency saturation) and ``b`` (length normalization) are BM25's parameters.
    """
    source_filter = ""
    params: dict = {"query": query, "tenant": tenant.pk, "k1": float(k1), "b": float(b), "limit": limit}
    if source_ids:
        source_filter = (
            "AND p.chunk_id IN (SELECT c.id FROM knowledge_chunk c JOIN knowledge_documentversion v"
            " ON v.id = c.version_id JOIN knowledge_document d ON d.id = v.document_id"
            " WHERE c.tenant_id = %(tenant)s AND d.source_id = ANY(%(sources)s))"
        )
        params["sources"] = list(source_ids)
    with connection.cursor() as cursor:
        cursor.execute(_BM25_SQL.format(source_filter=source_filter), params)
        return [(row[0], float(row[1])) for row in cursor.fetchall()]


def dense_candidates(*, tenant: Tenant, vector, limit: int, source_ids: list[int] | None = None, ef_search: int = 100):
    """Chunk ids and cosine similarities of the tenant's nearest chunks (HNSW), best first."""
    dims = len(vector)
    literal = "[" + ",".join(f"{x:.7g}" for x in vector) + "]"
    source_sql, source_params = _source_filter(tenant, source_ids)
    distance = f"(c.embedding::vector({dims}) <=> %s::vector({dims}))"
    sql = (
        f"SELECT c.id, 1 - {distance} AS score FROM knowledge_chunk c"
        f" WHERE c.tenant_id = %s AND c.embedder = %s{source_sql}"
        f" ORDER BY {distance} LIMIT %s"
    )
    params = [literal, tenant.pk, tenant.embedder, *source_params, literal, limit]
    with transaction.atomic(), connection.cursor() as cursor:
        # Iterative scans keep returning neighbours until `limit` rows pass the tenant filter.
        cursor.execute("SET LOCAL hnsw.iterative_scan = relaxed_order")
        cursor.execute(f"SET LOCAL hnsw.ef_search = {max(int(ef_search), limit)}")
        cursor.execute(sql, params)
        rows = cursor.fetchall()
    # relaxed_order may return slightly out-of-order rows; restore exact order.
    return sorted(((row[0], float(row[1])) for row in rows), key=lambda pair: -pair[1])


def fuse(lists: dict[str, list[tuple[int, float]]], config: SearchConfig) -> list[tuple[int, float]]:
    """Fuse the lexical and dense candidate lists with ``config.fusion`` (see ``retrieval.fusion``)."""
    weights = {"dense": config.dense_weight, "lexical": config.lexical_weight}
    if config.fusion == "weighted":
        return fusion.weighted(lists, weights=weights)
    if config.fusion == "tm2c2":
        return fusion.tm2c2(lists, weights=weights, lower={"dense": -1.0, "lexical": 0.0})
    if config.fusion == "dbsf":
        return fusion.dbsf(lists, weights=weights)
    return fusion.rrf(lists, k=config.rrf_k)


def chunk_search(
    *,
    tenant: Tenant,
    query: str,
    k: int = 10,
    mode: str = "hybrid",
    source_ids: list[int] | None = None,
    config: SearchConfig | None = None,
) -> SearchResponse:
    """Search the tenant's chunks; return the top ``k`` with component scores and timings (ms).

    ``mode`` is hybrid (lexical + dense, fused), lexical or dense. ``InvalidInput`` for an empty
    or over-long query, a bad ``k`` or an unknown mode.
    """
    query = (query or "").strip()
    if not query:
        raise InvalidInput("The query is empty.")
    if len(query) > MAX_QUERY_CHARS:
        raise InvalidInput(f"The query is longer than {MAX_QUERY_CHARS} characters.")
    if mode not in MODES:
        raise InvalidInput(f"Unknown mode {mode!r}; use one of {', '.join(MODES)}.")
    if not 1 <= k <= 200:
        raise InvalidInput("k must be between 1 and 200.")
    config = config or SearchConfig.for_tenant(tenant)
    limit = max(config.candidates, k)
    timings: dict[str, float] = {}
    started = time.perf_counter()
    lists: dict[str, list[tuple[int, float]]] = {}

    if mode in ("hybrid", "lexical"):
        t = time.perf_counter()
        lists["lexical"] = lexical_candidates(
            tenant=tenant, query=query, limit=limit, source_ids=source_ids, k1=config.bm25_k1, b=config.bm25_b
        )
        timings["lexical_ms"] = (time.perf_counter() - t) * 1000
    if mode in ("hybrid", "dense"):
        t = time.perf_counter()
        vector = get_embedder(tenant.embedder).embed([query])[0]
        timings["embed_ms"] = (time.perf_counter() - t) * 1000
        t = time.perf_counter()
        lists["dense"] = dense_candidates(
            tenant=tenant, vector=vector, limit=limit, source_ids=source_ids, ef_search=config.ef_search
        )
        timings["dense_ms"] = (time.perf_counter() - t) * 1000

    t = time.perf_counter()
    if mode != "hybrid":
        fused = lists[mode]
    else:
        fused = fuse(lists, config)
    timings["fusion_ms"] = (time.perf_counter() - t) * 1000

    top = fused[:k]
    t = time.perf_counter()
    chunks = (
        Chunk.objects.for_tenant(tenant)
        .select_related("version__document__source")
        .defer("embedding", "term_freqs", "search_vector", "version__text")
        .in_bulk([i for i, _ in top])
    )
    timings["fetch_ms"] = (time.perf_counter() - t) * 1000
    positions = {
        name: {item: (rank, score) for rank, (item, score) in enumerate(ranking, 1)} for name, ranking in lists.items()
    }
    results = []
    for item, score in top:
        if item not in chunks:
            continue
        components = {
            name: {"rank": positions[name][item][0], "score": round(positions[name][item][1], 6)}
            for name in lists
            if item in positions[name]
        }
        results.append(SearchResult(chunk=chunks[item], score=score, rank=len(results) + 1, components=components))
    timings["total_ms"] = (time.perf_counter() - started) * 1000
    return SearchResponse(
        results=results, timings_ms={k_: round(v, 2) for k_, v in timings.items()}, mode=mode, config=config
    )
