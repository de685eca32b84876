"""Fuse stage: one ranking from the retrievers' candidate lists (the fusion functions of
``retrieval.fusion``: ``rrf``, ``weighted``, ``tm2c2``, ``dbsf``), then the top-k chunks loaded
(one query).
"""

from __future__ import annotations

import time

from retrieval.config import SearchConfig
from retrieval.fusion import dbsf, rrf, tm2c2, weighted
from retrieval.stages.base import Stage
from retrieval.stages.fetch import results_fetch
from retrieval.stages.rerank import rerank_depth
from retrieval.types import CandidateLists, Ranking


def candidates_fuse(candidates: CandidateLists, config: SearchConfig) -> Ranking:
    """Fuse the lists with ``config.fusion``; a single list passes through unchanged. The
    ``memory`` list (facts walks kept, ``retrieval.walks.memory``) weighs ``memory_weight``."""
    lists = candidates.lists
    if len(lists) == 1:
        return next(iter(lists.values()))
    weights = {"dense": config.dense_weight, "lexical": config.lexical_weight, "memory": config.memory_weight}
    if config.fusion == "weighted":
        return weighted(lists, weights=weights)
    if config.fusion == "tm2c2":
        return tm2c2(lists, weights=weights, lower={"dense": -1.0, "lexical": 0.0, "memory": 0.0})
    if config.fusion == "dbsf":
        return dbsf(lists, weights=weights)
    return rrf(lists, k=config.rrf_k, weights={"memory": config.memory_weight})


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
        depth = rerank_depth(state, k=state.depth or state.request.k)
        started = time.perf_counter()
        state.results = results_fetch(tenant=state.tenant, ranking=ranking, candidates=candidates, k=depth)
        state.timings["fetch_ms"] = (time.perf_counter() - started) * 1000
        step.summary = {
            "fusion": search.fusion if len(candidates.lists) > 1 else "none",
            "kept": [[r.chunk.pk, round(r.score, 5)] for r in state.results[:20]],
        }
        return state
