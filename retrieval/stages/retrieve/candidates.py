"""Retrieve stage: run the lexical and/or dense retriever for a ``QueryPlan``.

The lexical side searches ``plan.lexical_terms`` when a rewrite stage set them (weighted
lexemes), else ``plan.lexical_query``, in the body's BM25 plus, with a tenant's
``enrichment_weight``, that weight times the enrichment field's BM25 (``enrichment``); the dense side uses ``plan.dense_vector`` when a stage
passed its own (HyDE), else the embedding of ``plan.dense_text``. Both apply the same
``RetrievalFilter``.

In hybrid mode the query embedding runs in a worker thread while the calling thread runs the
BM25 SQL: the model's forward pass (torch or ONNX Runtime) releases the GIL, and PostgreSQL
scores in its own process, so the two overlap. All database work stays on the calling thread,
whose Django connection (and open transaction, if any) both retrievers then share.
"""

from __future__ import annotations

import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor

import numpy as np

from knowledge.embedders import get_embedder
from retrieval.config import SearchConfig
from retrieval.stages.retrieve.dense import vector_search
from retrieval.stages.retrieve.enrichment import enrichment_bm25_search, fields_combine
from retrieval.stages.retrieve.filters import RetrievalFilter
from retrieval.stages.retrieve.lexical import bm25_search
from retrieval.types import CandidateLists, QueryPlan

# Query embeddings are short forward passes; the embedder serializes its own calls, so a couple
# of workers only let two searches queue without blocking each other's SQL.
_EMBED_WORKERS = 2
_executor: ThreadPoolExecutor | None = None
_executor_lock = threading.Lock()


def _embed_executor() -> ThreadPoolExecutor:
    global _executor
    with _executor_lock:
        if _executor is None:
            _executor = ThreadPoolExecutor(max_workers=_EMBED_WORKERS, thread_name_prefix="kb-query-embed")
        return _executor


def query_embed(*, embedder: str, text: str) -> tuple[np.ndarray, float]:
    """The query vector of ``text`` with ``embedder`` and the milliseconds it took.

    Returns a 1-D float32 array of the embedder's dimension (unit length). Uses the embedder's
    cached ``embed_query`` when it has one, else ``embed([text])[0]``. The embedder's errors
    (e.g. ``UpstreamError`` from a remote endpoint) propagate.
    """
    started = time.perf_counter()
    model = get_embedder(embedder)
    embed_query = getattr(model, "embed_query", None)
    vector = embed_query(text) if embed_query is not None else model.embed([text])[0]
    return np.asarray(vector, dtype=np.float32).reshape(-1), (time.perf_counter() - started) * 1000


def _lexical(plan: QueryPlan, *, where: RetrievalFilter, config: SearchConfig, limit: int):
    """The body's BM25 top ``limit``; with an ``enrichment_weight``, combined with the enrichment
    field's BM25 (``enrichment.fields_combine``). Returns ``(ranking, {chunk id: parts} or None)``."""
    query = {"terms": plan.lexical_terms} if plan.lexical_terms else {"query": plan.lexical_query}
    body = bm25_search(where=where, limit=limit, k1=config.bm25_k1, b=config.bm25_b, **query)
    if config.enrichment_weight <= 0:
        return body, None
    field = enrichment_bm25_search(
        where=where, limit=limit, also=[c for c, _ in body], k1=config.bm25_k1, b=config.bm25_b, **query
    )
    return fields_combine(body, field, weight=config.enrichment_weight, limit=limit)


def candidates_retrieve(
    plan: QueryPlan,
    *,
    where: RetrievalFilter,
    embedder: str,
    mode: str,
    config: SearchConfig,
    limit: int,
    concurrent: bool = True,
) -> tuple[CandidateLists, dict[str, float]]:
    """Each retriever's top ``limit`` candidates for ``plan`` and the time each took (ms).

    ``mode`` is hybrid (both), lexical or dense. In hybrid mode, when the plan carries no
    vector, the query is embedded in a worker thread while this thread runs the BM25 query
    (``concurrent=False`` runs them one after the other; the candidates are the same).

    Timings (ms): ``lexical_ms`` (BM25 SQL), ``embed_ms`` (the embedding itself, absent when the
    plan carries a vector), ``dense_ms`` (vector SQL); when the embedding overlapped the BM25
    query also ``embed_wait_ms`` (how long this thread still waited for the vector after BM25)
    and ``overlap_ms`` (``lexical_ms + embed_ms`` minus the wall time of the two together: the
    time saved). The dense side searches with HNSW ``ef_search`` at least ``limit``, so its
    candidate depth never exceeds the graph search's beam.
    """
    lists: dict = {}
    details: dict = {}
    timings: dict[str, float] = {}
    vector = plan.dense_vector
    pending: Future | None = None
    overlap_started = time.perf_counter()
    wants_dense = mode in ("hybrid", "dense")
    if wants_dense and vector is None and mode == "hybrid" and concurrent:
        get_embedder(embedder)  # load the model (first use) here, so errors surface on this thread
        pending = _embed_executor().submit(query_embed, embedder=embedder, text=plan.dense_text)
    if mode in ("hybrid", "lexical"):
        started = time.perf_counter()
        try:
            lists["lexical"], parts = _lexical(plan, where=where, config=config, limit=limit)
            if parts is not None:
                details["lexical"] = parts
        except BaseException:
            if pending is not None:
                pending.cancel()  # not started yet: dropped; running: finishes, its result unused
            raise
        timings["lexical_ms"] = (time.perf_counter() - started) * 1000
    if pending is not None:
        waited = time.perf_counter()
        vector, timings["embed_ms"] = pending.result()
        timings["embed_wait_ms"] = (time.perf_counter() - waited) * 1000
        together = (time.perf_counter() - overlap_started) * 1000
        timings["overlap_ms"] = max(0.0, timings["lexical_ms"] + timings["embed_ms"] - together)
    if wants_dense:
        if vector is None:
            vector, timings["embed_ms"] = query_embed(embedder=embedder, text=plan.dense_text)
        started = time.perf_counter()
        lists["dense"] = vector_search(
            where=where, embedder=embedder, vector=vector, limit=limit, ef_search=max(config.ef_search, limit)
        )
        timings["dense_ms"] = (time.perf_counter() - started) * 1000
    return CandidateLists(lists=lists, details=details), timings
