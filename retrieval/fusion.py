"""The fusion functions: one ranking from several ranked lists, for the fuse stage
(``retrieval.stages.fuse``) and for the memory retriever's facts (``retrieval.walks.memory``).

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

from retrieval.types import Ranking


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
