"""Retrieve stage: run the lexical and/or dense retriever for a ``QueryPlan``.

The lexical side searches ``plan.lexical_terms`` when a rewrite stage set them (weighted
lexemes), else ``plan.lexical_query``; the dense side uses ``plan.dense_vector`` when a stage
passed its own (HyDE), else the embedding of ``plan.dense_text``. Both apply the same
``RetrievalFilter``.
"""

from __future__ import annotations

import time

from knowledge.embedders import get_embedder
from retrieval.config import SearchConfig
from retrieval.stages.retrieve.dense import vector_search
from retrieval.stages.retrieve.filters import RetrievalFilter
from retrieval.stages.retrieve.lexical import bm25_search
from retrieval.types import CandidateLists, QueryPlan


def candidates_retrieve(
    plan: QueryPlan,
    *,
    where: RetrievalFilter,
    embedder: str,
    mode: str,
    config: SearchConfig,
    limit: int,
) -> tuple[CandidateLists, dict[str, float]]:
    """Each retriever's top ``limit`` candidates for ``plan`` and the time each took (ms).

    ``mode`` is hybrid (both), lexical or dense. Timings: ``lexical_ms``, ``embed_ms`` (absent
    when the plan carries a vector), ``dense_ms``.
    """
    lists: dict = {}
    timings: dict[str, float] = {}
    if mode in ("hybrid", "lexical"):
        started = time.perf_counter()
        if plan.lexical_terms:
            lists["lexical"] = bm25_search(
                where=where, terms=plan.lexical_terms, limit=limit, k1=config.bm25_k1, b=config.bm25_b
            )
        else:
            lists["lexical"] = bm25_search(
                where=where, query=plan.lexical_query, limit=limit, k1=config.bm25_k1, b=config.bm25_b
            )
        timings["lexical_ms"] = (time.perf_counter() - started) * 1000
    if mode in ("hybrid", "dense"):
        vector = plan.dense_vector
        if vector is None:
            started = time.perf_counter()
            vector = get_embedder(embedder).embed([plan.dense_text])[0]
            timings["embed_ms"] = (time.perf_counter() - started) * 1000
        started = time.perf_counter()
        lists["dense"] = vector_search(
            where=where, embedder=embedder, vector=vector, limit=limit, ef_search=max(config.ef_search, limit)
        )
        timings["dense_ms"] = (time.perf_counter() - started) * 1000
    return CandidateLists(lists=lists), timings
