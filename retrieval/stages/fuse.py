"""Fuse stage: one ranking from the retrievers' candidate lists, then the top-k chunks loaded.

The fusion functions themselves (RRF, min-max weighted, TM2C2, DBSF) are in ``retrieval.fusion``.
"""

from __future__ import annotations

from knowledge.models import Chunk
from retrieval import fusion
from retrieval.config import SearchConfig
from retrieval.types import CandidateLists, Ranking, SearchResult


def candidates_fuse(candidates: CandidateLists, config: SearchConfig) -> Ranking:
    """Fuse the lists with ``config.fusion``; a single list passes through unchanged."""
    lists = candidates.lists
    if len(lists) == 1:
        return next(iter(lists.values()))
    weights = {"dense": config.dense_weight, "lexical": config.lexical_weight}
    if config.fusion == "weighted":
        return fusion.weighted(lists, weights=weights)
    if config.fusion == "tm2c2":
        return fusion.tm2c2(lists, weights=weights, lower={"dense": -1.0, "lexical": 0.0})
    if config.fusion == "dbsf":
        return fusion.dbsf(lists, weights=weights)
    return fusion.rrf(lists, k=config.rrf_k)


def results_fetch(*, tenant, ranking: Ranking, candidates: CandidateLists, k: int) -> list[SearchResult]:
    """The top ``k`` of ``ranking`` as ``SearchResult`` rows (chunk, version, document, source loaded).

    One narrow query, scoped to ``tenant``; each result carries every retriever's rank and score
    for its chunk (``components``).
    """
    top = ranking[:k]
    chunks = (
        Chunk.objects.for_tenant(tenant)
        .select_related("version__document__source")
        .defer("embedding", "term_freqs", "version__text")
        .in_bulk([item for item, _ in top])
    )
    positions = {
        name: {item: (rank, score) for rank, (item, score) in enumerate(ranked, 1)}
        for name, ranked in candidates.lists.items()
    }
    results: list[SearchResult] = []
    for item, score in top:
        if item not in chunks:
            continue
        components = {
            name: {"rank": found[item][0], "score": round(found[item][1], 6)}
            for name, found in positions.items()
            if item in found
        }
        results.append(SearchResult(chunk=chunks[item], score=score, rank=len(results) + 1, components=components))
    return results
