"""Fuse stage: one ranking from the retrievers' candidate lists, then the top-k chunks loaded (one query).

The fusion functions:

* ``rrf``: reciprocal rank fusion, score(d) = sum_i w_i / (k + rank_i(d)) with k = 60
  (Cormack, Clarke & Buettcher, SIGIR 2009).
* ``weighted``: convex combination of min-max normalized scores, by default 0.7 dense and
  0.3 lexical (the 70/30 hybrid of seed ``advanced-rag-querying.txt``, after Wang et al.).
* ``tm2c2``: theoretical min-max normalization; ``dbsf``: distribution-based score fusion.

Each takes ``{name: [(id, score), ...]}`` lists ordered best first and returns
``[(id, fused_score), ...]`` best first; ties keep the order of first appearance.
"""

from __future__ import annotations

import statistics
import time

from django.db import connection
from django.db.models.base import ModelState

from knowledge.models import Chunk, Document, DocumentVersion, Source
from retrieval.config import SearchConfig
from retrieval.stages.base import Stage
from retrieval.stages.rerank import rerank_depth
from retrieval.types import CandidateLists, Ranking, SearchResult


def rrf(lists: dict[str, Ranking], *, k: int = 60, weights: dict[str, float] | None = None) -> Ranking:
    """Reciprocal rank fusion with per-list ``weights`` (default 1 each); ranks start at 1."""
    scores: dict[int, float] = {}
    for name, ranking in lists.items():
        weight = 1.0 if weights is None else weights.get(name, 1.0)
        for rank, (item, _score) in enumerate(ranking, start=1):
            scores[item] = scores.get(item, 0.0) + weight / (k + rank)
    return sorted(scores.items(), key=lambda pair: -pair[1])


def min_max(ranking: Ranking) -> dict[int, float]:
    """Scores rescaled to [0, 1] within the list (all 1.0 when every score is equal)."""
    if not ranking:
        return {}
    values = [score for _, score in ranking]
    low, high = min(values), max(values)
    span = high - low
    return {item: (score - low) / span if span > 0 else 1.0 for item, score in ranking}


def weighted(lists: dict[str, Ranking], *, weights: dict[str, float]) -> Ranking:
    """Weighted sum of min-max normalized scores; an item missing from a list scores 0 there."""
    scores: dict[int, float] = {}
    for name, ranking in lists.items():
        weight = weights.get(name, 0.0)
        for item, normalized in min_max(ranking).items():
            scores[item] = scores.get(item, 0.0) + weight * normalized
    return sorted(scores.items(), key=lambda pair: -pair[1])


def tm2c2(lists: dict[str, Ranking], *, weights: dict[str, float], lower: dict[str, float]) -> Ranking:
    """Convex combination with theoretical min-max normalization (TM2C2).

    Each score becomes ``(s - lower) / (max - lower)`` where ``lower`` is the scorer's
    theoretical minimum (0 for BM25, -1 for cosine similarity) and ``max`` the list's best
    score; missing items score 0. Bruch, Gai & Ingber, "An Analysis of Fusion Functions for
    Hybrid Retrieval", ACM TOIS 2023, found it more robust than RRF and plain min-max.
    """
    scores: dict[int, float] = {}
    for name, ranking in lists.items():
        if not ranking:
            continue
        floor = lower.get(name, 0.0)
        top = max(score for _, score in ranking)
        span = top - floor
        weight = weights.get(name, 0.0)
        for item, score in ranking:
            normalized = (score - floor) / span if span > 0 else 1.0
            scores[item] = scores.get(item, 0.0) + weight * normalized
    return sorted(scores.items(), key=lambda pair: -pair[1])


def dbsf(lists: dict[str, Ranking], *, weights: dict[str, float]) -> Ranking:
    """Distribution-based score fusion: scores scaled by the list's mean ± 3 standard deviations.

    ``(s - (mu - 3 sigma)) / (6 sigma)``, clipped to [0, 1]; missing items score 0
    (as in Qdrant's DBSF fusion).
    """
    scores: dict[int, float] = {}
    for name, ranking in lists.items():
        if not ranking:
            continue
        values = [score for _, score in ranking]
        mu = statistics.fmean(values)
        sigma = statistics.pstdev(values) if len(values) > 1 else 0.0
        weight = weights.get(name, 0.0)
        for item, score in ranking:
            normalized = min(1.0, max(0.0, (score - (mu - 3 * sigma)) / (6 * sigma))) if sigma > 0 else 1.0
            scores[item] = scores.get(item, 0.0) + weight * normalized
    return sorted(scores.items(), key=lambda pair: -pair[1])


def candidates_fuse(candidates: CandidateLists, config: SearchConfig) -> Ranking:
    """Fuse the lists with ``config.fusion``; a single list passes through unchanged."""
    lists = candidates.lists
    if len(lists) == 1:
        return next(iter(lists.values()))
    weights = {"dense": config.dense_weight, "lexical": config.lexical_weight}
    if config.fusion == "weighted":
        return weighted(lists, weights=weights)
    if config.fusion == "tm2c2":
        return tm2c2(lists, weights=weights, lower={"dense": -1.0, "lexical": 0.0})
    if config.fusion == "dbsf":
        return dbsf(lists, weights=weights)
    return rrf(lists, k=config.rrf_k)


# The result rows, narrow: only the columns results, packing and citations read (never the
# chunk's embedding or BM25 columns, nor the version's full text). Each join is a LATERAL
# subquery kept from being flattened (OFFSET 0), so PostgreSQL looks up each result's version and
# document by primary key instead of hashing every tenant's versions (the plain join's plan once
# k reaches a few dozen): the cost follows k, not the size of the tables.
_WANTED = {
    Chunk: {
        *("id", "tenant_id", "version_id", "ordinal", "heading", "text", "token_count", "char_start", "char_end"),
        "kind",
    },
    DocumentVersion: {"id", "document_id", "number", "published_at", "ingested_at", "is_current"},
    Document: {"id", "tenant_id", "source_id", "external_id", "uri", "title"},
    Source: {"id", "tenant_id", "name", "kind", "reliability", "half_life_days"},
}
# In each model's field order, as ``Model.from_db`` expects them.
_RESULT_COLUMNS = {
    model: tuple(f.attname for f in model._meta.concrete_fields if f.attname in wanted)
    for model, wanted in _WANTED.items()
}
_RESULTS = """SELECT {chunk}, {version}, {document}, {source}
FROM knowledge_chunk c
CROSS JOIN LATERAL (
    SELECT {version} FROM knowledge_documentversion v WHERE v.id = c.version_id OFFSET 0
) v
CROSS JOIN LATERAL (
    SELECT {document} FROM knowledge_document d
    WHERE d.id = v.document_id AND d.tenant_id = %(tenant)s OFFSET 0
) d
JOIN knowledge_source s ON s.id = d.source_id AND s.tenant_id = %(tenant)s
WHERE c.tenant_id = %(tenant)s AND c.id = ANY(%(ids)s::bigint[])""".format(
    **{
        name: ", ".join(f"{alias}.{column}" for column in _RESULT_COLUMNS[model])
        for name, alias, model in (
            ("chunk", "c", Chunk),
            ("version", "v", DocumentVersion),
            ("document", "d", Document),
            ("source", "s", Source),
        )
    }
)


_VERSION = Chunk._meta.get_field("version")
_DOCUMENT = DocumentVersion._meta.get_field("document")
_SOURCE = Document._meta.get_field("source")


def _loaded(model, db: str, values):
    """A ``model`` instance read from ``db`` holding ``values`` for ``_RESULT_COLUMNS[model]``.

    What ``Model.from_db`` builds, without running ``__init__`` per row (a third of a 100-row
    fetch's time; these models have no ``pre_init``/``post_init`` receivers): the other fields
    are deferred, so reading one loads it from the database like after ``QuerySet.only``.
    """
    instance = model.__new__(model)
    instance.__dict__.update(zip(_RESULT_COLUMNS[model], values, strict=True))
    instance._state = ModelState()
    instance._state.adding = False
    instance._state.db = db
    return instance


def chunks_load(*, tenant, chunk_ids: list[int]) -> dict[int, Chunk]:
    """The ``tenant``'s chunks among ``chunk_ids`` with version, document and source loaded: one query.

    Returns ``{chunk id: Chunk}`` (ids of other tenants' or deleted chunks are absent). Only the
    columns in ``_RESULT_COLUMNS`` are loaded; the others (the chunk's embedding, the version's
    text, ...) are deferred like ``QuerySet.only`` defers them: reading one costs a query.
    """
    if not chunk_ids:
        return {}
    tenant_id = tenant if isinstance(tenant, int) else tenant.pk
    with connection.cursor() as cursor:
        cursor.execute(_RESULTS, {"tenant": tenant_id, "ids": list(chunk_ids)})
        rows = cursor.fetchall()
    db = connection.alias
    widths = [len(columns) for columns in _RESULT_COLUMNS.values()]
    sources: dict[int, Source] = {}
    documents: dict[int, Document] = {}
    versions: dict[int, DocumentVersion] = {}
    chunks: dict[int, Chunk] = {}
    for row in rows:
        parts, start = [], 0
        for width in widths:
            parts.append(row[start : start + width])
            start += width
        chunk_row, version_row, document_row, source_row = parts
        source = sources.get(source_row[0])
        if source is None:
            source = sources[source_row[0]] = _loaded(Source, db, source_row)
        document = documents.get(document_row[0])
        if document is None:
            document = documents[document_row[0]] = _loaded(Document, db, document_row)
            _SOURCE.set_cached_value(document, source)
        version = versions.get(version_row[0])
        if version is None:
            version = versions[version_row[0]] = _loaded(DocumentVersion, db, version_row)
            _DOCUMENT.set_cached_value(version, document)
        chunk = _loaded(Chunk, db, chunk_row)
        _VERSION.set_cached_value(chunk, version)
        chunks[chunk.pk] = chunk
    return chunks


def results_fetch(*, tenant, ranking: Ranking, candidates: CandidateLists, k: int) -> list[SearchResult]:
    """The top ``k`` of ``ranking`` as ``SearchResult`` rows (chunk, version, document, source loaded).

    One narrow query (``chunks_load``), scoped to ``tenant``; each result carries every
    retriever's rank and score for its chunk (``components``).
    """
    top = ranking[:k]
    chunks = chunks_load(tenant=tenant, chunk_ids=[item for item, _ in top])
    positions = {
        name: {item: (rank, score) for rank, (item, score) in enumerate(ranked, 1)}
        for name, ranked in candidates.lists.items()
    }
    results: list[SearchResult] = []
    for item, score in top:
        if item not in chunks:
            continue
        components = {
            name: {
                "rank": found[item][0],
                "score": round(found[item][1], 6),
                **candidates.details.get(name, {}).get(item, {}),
            }
            for name, found in positions.items()
            if item in found
        }
        results.append(SearchResult(chunk=chunks[item], score=score, rank=len(results) + 1, components=components))
    return results


class Fuse(Stage):
    """The ``fuse`` step: the candidate lists fused by the spec's ``fusion`` (``candidates_fuse``),
    then the top ``depth`` chunks loaded (``results_fetch``; more when a signal reranker runs,
    ``rerank_depth``)."""

    name = "fuse"

    def apply(self, state, step):
        search, candidates = state.spec.search, state.candidates
        started = time.perf_counter()
        ranking = candidates_fuse(candidates, search)
        state.timings["fusion_ms"] = (time.perf_counter() - started) * 1000
        depth = rerank_depth(state, k=state.depth or state.k)
        started = time.perf_counter()
        state.results = results_fetch(tenant=state.tenant, ranking=ranking, candidates=candidates, k=depth)
        state.timings["fetch_ms"] = (time.perf_counter() - started) * 1000
        step.summary = {
            "fusion": search.fusion if len(candidates.lists) > 1 else "none",
            "kept": [[r.chunk.pk, round(r.score, 5)] for r in state.results[:20]],
        }
        return state
