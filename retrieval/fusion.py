"""Rank fusion of lexical and dense candidate lists.

* ``rrf``: reciprocal rank fusion, score(d) = sum_i w_i / (k + rank_i(d)) with k = 60
  (Cormack, Clarke & Buettcher, SIGIR 2009).
* ``weighted``: convex combination of min-max normalized scores, by default 0.7 dense and
  0.3 lexical (the 70/30 hybrid of seed ``advanced-rag-querying.txt``, after Wang et al.).

Both take ``{name: [(id, score), ...]}`` lists ordered best first and return
``[(id, fused_score), ...]`` best first; ties keep the order of first appearance.
"""

from __future__ import annotations

Ranking = list[tuple[int, float]]


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
