"""Retrieve stage: run the lexical and/or dense retriever for a ``QueryPlan``.

The lexical side searches ``plan.lexical_terms`` when a rewrite stage set them (weighted
lexemes), else ``plan.lexical_query``, in the body's BM25 plus, with a tenant's
``enrichment_weight``, that weight times the enrichment field's BM25 (``enrichment``); the dense side uses ``plan.dense_vector`` when a stage
passed its own (HyDE), else the embedding of ``plan.dense_text``. With a tenant's
``memory_weight``, a third list, ``memory``: chunks ranked by the facts walks kept from them
(the run registry's ``memory_search``, ``retrieval.registry``: ``retrieval.walks.memory`` by
default, passed in by the caller, since the walks package imports these stages). All apply the
same ``RetrievalFilter``.

In hybrid mode the dense side (the query embedding, then the vector SQL) runs in a worker
thread while the calling thread runs the BM25 SQL: the model's forward pass (torch or ONNX
Runtime) releases the GIL, and PostgreSQL scores each query in its own backend process, so the
two retrievers overlap and hybrid costs about the slower of them instead of their sum
(``benchmarks/scale.py``). The worker uses its own Django connection (connections are
per thread), kept open between searches, with the caller's row-level-security scope
(``core.rls``: a copied ``contextvars`` context, so the worker's statements bind the same tenant).

A second connection cannot see a transaction the caller has not committed, so inside an atomic
block (``connection.in_atomic_block``: tests, a caller's rolled-back benchmark block) only the
embedding runs in the worker and the vector SQL stays on the caller's connection.
``KB_CONCURRENT_RETRIEVERS=false`` keeps all SQL on the calling thread everywhere.
"""

from __future__ import annotations

import contextvars
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor

import numpy as np
from django.conf import settings

from core.replicas import read_connection
from knowledge.embedders import get_embedder
from retrieval.config import SearchConfig
from retrieval.filters import RetrievalFilter
from retrieval.stages.base import Stage
from retrieval.stages.retrieve.dense import vector_search
from retrieval.stages.retrieve.enrichment import enrichment_bm25_search, fields_combine
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


def retriever_workers_close() -> None:
    """Close the worker threads' database connections (the dense side's; see the module docstring).

    For test teardown and shutdown hooks: a connection is closed by the thread that opened it, so
    one task per worker is submitted, held at a barrier until every worker has one. Idempotent;
    a no-op when no worker was started.
    """
    with _executor_lock:
        executor = _executor
    if executor is None:
        return
    barrier = threading.Barrier(_EMBED_WORKERS, timeout=10)

    def close() -> None:
        from django.db import connections

        try:
            barrier.wait()
        except threading.BrokenBarrierError:
            pass  # fewer threads answered in time: close this one's anyway
        connections.close_all()

    for future in [executor.submit(close) for _ in range(_EMBED_WORKERS)]:
        future.result()


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


def _dense(
    plan: QueryPlan, *, vector, where: RetrievalFilter, embedder: str, config: SearchConfig, limit: int
) -> tuple[list, dict[str, float]]:
    """The dense side: embed ``plan.dense_text`` unless ``vector`` is given, then the vector SQL.
    Returns ``(ranking, timings)`` with ``dense_ms`` and, when it embedded, ``embed_ms``."""
    timings: dict[str, float] = {}
    if vector is None:
        vector, timings["embed_ms"] = query_embed(embedder=embedder, text=plan.dense_text)
    started = time.perf_counter()
    ranking = vector_search(
        where=where, embedder=embedder, vector=vector, limit=limit, ef_search=max(config.ef_search, limit)
    )
    timings["dense_ms"] = (time.perf_counter() - started) * 1000
    return ranking, timings


def _dense_on_worker(*args, **kwargs) -> tuple[list, dict[str, float]]:
    """``_dense`` on a worker thread's own connection; a connection broken by an error is
    replaced before the next search (the worker keeps its connection between searches)."""
    worker_connection = read_connection()  # the caller's replica in a marked read path (core.replicas)
    if worker_connection.connection is not None and worker_connection.errors_occurred:
        worker_connection.close_if_unusable_or_obsolete()
    return _dense(*args, **kwargs)


def candidates_retrieve(
    plan: QueryPlan,
    *,
    where: RetrievalFilter,
    embedder: str,
    mode: str,
    config: SearchConfig,
    limit: int,
    concurrent: bool = True,
    memory_search: Callable[..., list[tuple[int, float]]] | None = None,
) -> tuple[CandidateLists, dict[str, float]]:
    """Each retriever's top ``limit`` candidates for ``plan`` and the time each took (ms); the
    memory retriever ``memory_search`` (the run registry's) too when ``config.memory_weight`` > 0.

    ``mode`` is hybrid (both), lexical or dense. In hybrid mode the dense side (embedding and
    vector SQL; inside an atomic block the embedding only) runs in a worker thread while this
    thread runs the BM25 query (module docstring); ``concurrent=False`` runs them one after the
    other. The candidates are the same either way.

    Timings (ms): ``lexical_ms`` (BM25 SQL), ``embed_ms`` (the embedding itself, absent when the
    plan carries a vector), ``dense_ms`` (vector SQL); when the two sides overlapped also
    ``overlap_ms`` (the sides' times summed minus the wall time of the two together: the time
    saved) and how long this thread still waited after BM25: ``dense_wait_ms`` (the whole dense
    side on the worker) or ``embed_wait_ms`` (the embedding only). The dense side searches with HNSW ``ef_search`` at least ``limit``, so its
    candidate depth never exceeds the graph search's beam.
    """
    lists: dict = {}
    details: dict = {}
    timings: dict[str, float] = {}
    vector = plan.dense_vector
    pending: Future | None = None  # the embedding alone, or the whole dense side (dense_on_worker)
    overlap_started = time.perf_counter()
    wants_dense = mode in ("hybrid", "dense")
    overlap = wants_dense and mode == "hybrid" and concurrent
    dense_on_worker = overlap and settings.KB_CONCURRENT_RETRIEVERS and not read_connection().in_atomic_block
    dense_args = {"where": where, "embedder": embedder, "config": config, "limit": limit}
    if dense_on_worker:
        if vector is None:
            get_embedder(embedder)  # load the model (first use) here, so errors surface on this thread
        context = contextvars.copy_context()  # the caller's row-level-security scope
        pending = _embed_executor().submit(context.run, _dense_on_worker, plan, vector=vector, **dense_args)
    elif overlap and vector is None:
        get_embedder(embedder)
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
        if dense_on_worker:
            lists["dense"], dense_timings = pending.result()
            timings.update(dense_timings)
            timings["dense_wait_ms"] = (time.perf_counter() - waited) * 1000
            side = timings.get("embed_ms", 0.0) + timings["dense_ms"]
        else:
            vector, timings["embed_ms"] = pending.result()
            timings["embed_wait_ms"] = (time.perf_counter() - waited) * 1000
            side = timings["embed_ms"]
        together = (time.perf_counter() - overlap_started) * 1000
        timings["overlap_ms"] = max(0.0, timings["lexical_ms"] + side - together)
    if wants_dense and "dense" not in lists:
        lists["dense"], dense_timings = _dense(plan, vector=vector, **dense_args)
        timings.update(dense_timings)
    if config.memory_weight > 0 and memory_search is not None:
        started = time.perf_counter()
        embedder = embedder if wants_dense else None
        lists["memory"] = memory_search(
            query=plan.question, where=where, embedder=embedder, vector=plan.dense_vector, limit=limit
        )
        timings["memory_ms"] = (time.perf_counter() - started) * 1000
    return CandidateLists(lists=lists, details=details), timings


def _top(ranking, n: int = 20) -> list[list]:
    return [[item, round(score, 5)] for item, score in ranking[:n]]


class Retrieve(Stage):
    """The ``retrieve`` step: each retriever's candidates for the run's plan (``candidates_retrieve``),
    at least ``depth`` of them; the summary shows the queries and the best candidates of each list."""

    name = "retrieve"

    def __init__(self, *, concurrent: bool = True):
        self.concurrent = concurrent  # embed the query while BM25 runs (hybrid mode)

    def apply(self, state, step):
        plan, mode, search = state.plan, state.mode, state.spec.search
        candidates, timings = candidates_retrieve(
            plan,
            where=state.where,
            embedder=state.tenant.embedder,
            mode=mode,
            config=search,
            limit=max(search.candidates, state.depth or state.request.k),
            concurrent=self.concurrent,
            memory_search=state.registry.memory_search,
        )
        state.timings.update(timings)
        state.candidates = candidates
        queries: dict = {}
        if mode != "dense":
            queries["lexical"] = (
                {t: round(w, 4) for t, w in plan.lexical_terms.items()} if plan.lexical_terms else plan.lexical_query
            )
        if mode != "lexical":
            queries["dense"] = "HyDE vector" if plan.dense_vector is not None else plan.dense_text
        step.summary = {
            "mode": mode,
            "filter": state.where.summary(),
            "queries": queries,
            "candidates": {name: _top(ranked) for name, ranked in candidates.lists.items()},
            "counts": {name: len(ranked) for name, ranked in candidates.lists.items()},
        }
        return state
