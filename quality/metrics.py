"""Ranking metrics, as pure functions over a ranking (ids, best first) and graded judgments.

``relevance`` maps an id to its grade; ids with grade <= 0 or missing are not relevant. The
definitions follow the usual IR ones (Manning, Raghavan & Schütze, *Introduction to Information
Retrieval*, ch. 8; Järvelin & Kekäläinen 2002 for nDCG; trec_eval/pytrec_eval as used by BEIR):
an evaluation takes the mean of each metric over queries.

Document-level judgments score a ranking of chunks by each document's best (first) chunk: pass
the chunks' document ids through ``documents_from_chunks`` first.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence


def documents_from_chunks(ranked_doc_ids: Iterable[str]) -> list[str]:
    """The ids in order of first occurrence, without repeats: a document ranks at its best chunk."""
    seen: set[str] = set()
    ranking: list[str] = []
    for doc_id in ranked_doc_ids:
        if doc_id not in seen:
            seen.add(doc_id)
            ranking.append(doc_id)
    return ranking


def _relevant(relevance: Mapping[str, float]) -> set[str]:
    return {doc_id for doc_id, grade in relevance.items() if grade > 0}


def dcg(gains: Sequence[float]) -> float:
    """Discounted cumulative gain: sum over ranks i = 1.. of gain_i / log2(i + 1)."""
    return sum(gain / math.log2(i + 1) for i, gain in enumerate(gains, start=1))


def ndcg_at_k(ranking: Sequence[str], relevance: Mapping[str, float], k: int) -> float:
    """nDCG@k = DCG@k / IDCG@k, with linear (graded) gains and a log2(rank + 1) discount.

    The gain of a ranked id is its grade (0 when unjudged); the ideal DCG sorts *all* judged
    relevant grades, including those the ranking missed (Järvelin & Kekäläinen 2002; the
    trec_eval ``ndcg_cut`` used by BEIR). 0.0 when nothing is relevant.
    """
    ideal = dcg(sorted((g for g in relevance.values() if g > 0), reverse=True)[:k])
    if ideal == 0:
        return 0.0
    gains = [max(relevance.get(doc_id, 0), 0) for doc_id in ranking[:k]]
    return dcg(gains) / ideal


def recall_at_k(ranking: Sequence[str], relevance: Mapping[str, float], k: int) -> float:
    """recall@k = |relevant ∩ top k| / |relevant|; 0.0 when nothing is relevant."""
    relevant = _relevant(relevance)
    if not relevant:
        return 0.0
    return len(relevant.intersection(ranking[:k])) / len(relevant)


def precision_at_k(ranking: Sequence[str], relevance: Mapping[str, float], k: int) -> float:
    """precision@k = |relevant ∩ top k| / k (a ranking shorter than k is not padded up)."""
    relevant = _relevant(relevance)
    return sum(1 for doc_id in ranking[:k] if doc_id in relevant) / k


def mrr_at_k(ranking: Sequence[str], relevance: Mapping[str, float], k: int) -> float:
    """Reciprocal rank of the first relevant id within the top k (1/rank), else 0.0.

    Its mean over queries is MRR@k (Voorhees, TREC-8 QA track, 1999).
    """
    relevant = _relevant(relevance)
    for rank, doc_id in enumerate(ranking[:k], start=1):
        if doc_id in relevant:
            return 1.0 / rank
    return 0.0


def hit_at_1(ranking: Sequence[str], relevance: Mapping[str, float]) -> float:
    """1.0 when the top id is relevant, else 0.0: RAG4p's "precision" of a judgment list."""
    return 1.0 if ranking and ranking[0] in _relevant(relevance) else 0.0


def percentile(values: Sequence[float], q: float) -> float:
    """The q-th percentile (0..100) with linear interpolation between closest ranks.

    Same as ``numpy.percentile(values, q)`` (method "linear"): position (n - 1) * q / 100 in the
    sorted values. 0.0 for no values.
    """
    if not 0 <= q <= 100:
        raise ValueError("q must be in [0, 100]")
    if not values:
        return 0.0
    ordered = sorted(values)
    position = (len(ordered) - 1) * q / 100
    low = math.floor(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def mean(values: Sequence[float]) -> float:
    """Arithmetic mean; 0.0 for no values."""
    return sum(values) / len(values) if values else 0.0


def query_metrics(ranking: Sequence[str], relevance: Mapping[str, float]) -> dict[str, float]:
    """The per-query metrics an evaluation reports, keyed like ``ndcg@10``."""
    return {
        "ndcg@10": ndcg_at_k(ranking, relevance, 10),
        "recall@10": recall_at_k(ranking, relevance, 10),
        "recall@100": recall_at_k(ranking, relevance, 100),
        "mrr@10": mrr_at_k(ranking, relevance, 10),
        "hit@1": hit_at_1(ranking, relevance),
        "precision@10": precision_at_k(ranking, relevance, 10),
    }


def metrics_aggregate(per_query: Sequence[Mapping[str, float]], latencies_ms: Sequence[float]) -> dict[str, float]:
    """Mean of each per-query metric, p50/p95 of the latencies (ms) and the query count."""
    names = list(per_query[0]) if per_query else list(query_metrics([], {}))
    aggregated = {name: mean([m[name] for m in per_query]) for name in names}
    aggregated["p50_ms"] = percentile(latencies_ms, 50)
    aggregated["p95_ms"] = percentile(latencies_ms, 95)
    aggregated["queries"] = len(per_query)
    return aggregated
