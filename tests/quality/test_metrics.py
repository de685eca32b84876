import math

import pytest

from quality.metrics import (
    documents_from_chunks,
    hit_at_1,
    metrics_aggregate,
    mrr_at_k,
    ndcg_at_k,
    percentile,
    precision_at_k,
    recall_at_k,
)

# Three judged documents, graded: d1 is highly relevant (2), d3 and d9 relevant (1).
RELEVANCE = {"d1": 2, "d3": 1, "d9": 1, "d5": 0}
RANKING = ["d1", "d2", "d3", "d4"]


def test_ndcg_uses_graded_gains_and_all_judged_documents_for_the_ideal():
    # DCG@3  = 2/log2(2) + 0/log2(3) + 1/log2(4)           = 2 + 0 + 0.5          = 2.5
    # IDCG@3 = 2/log2(2) + 1/log2(3) + 1/log2(4) (d1,d3,d9) = 2 + 0.63093 + 0.5    = 3.13093
    # nDCG@3 = 2.5 / 3.13093 = 0.79848
    assert ndcg_at_k(RANKING, RELEVANCE, 3) == pytest.approx(0.79848, abs=1e-5)


def test_ndcg_of_the_ideal_ranking_is_one_and_of_a_miss_is_zero():
    assert ndcg_at_k(["d1", "d3", "d9"], RELEVANCE, 10) == pytest.approx(1.0)
    assert ndcg_at_k(["d2", "d4"], RELEVANCE, 10) == 0.0
    assert ndcg_at_k(["d1"], {}, 10) == 0.0


def test_ndcg_discounts_a_relevant_document_found_lower():
    # Only d1 (grade 1) is relevant and sits at rank 2: 1/log2(3) / 1 = 0.63093.
    assert ndcg_at_k(["x", "d1"], {"d1": 1}, 10) == pytest.approx(1 / math.log2(3))


def test_recall_counts_relevant_documents_found_within_k():
    assert recall_at_k(RANKING, RELEVANCE, 3) == pytest.approx(2 / 3)
    assert recall_at_k(RANKING, RELEVANCE, 1) == pytest.approx(1 / 3)


def test_precision_divides_by_k_even_for_a_short_ranking():
    assert precision_at_k(RANKING, RELEVANCE, 2) == pytest.approx(1 / 2)
    assert precision_at_k(RANKING, RELEVANCE, 10) == pytest.approx(2 / 10)


def test_reciprocal_rank_is_one_over_the_rank_of_the_first_relevant_document():
    assert mrr_at_k(RANKING, RELEVANCE, 10) == 1.0
    assert mrr_at_k(["d2", "d4", "d3"], RELEVANCE, 10) == pytest.approx(1 / 3)
    assert mrr_at_k(["d2", "d4", "d3"], RELEVANCE, 2) == 0.0


def test_a_zero_grade_does_not_count_as_relevant():
    assert hit_at_1(["d5", "d1"], RELEVANCE) == 0.0
    assert mrr_at_k(["d5", "d1"], RELEVANCE, 10) == 0.5


def test_hit_at_1_looks_only_at_the_top_result():
    assert hit_at_1(RANKING, RELEVANCE) == 1.0
    assert hit_at_1(["d2", "d1"], RELEVANCE) == 0.0
    assert hit_at_1([], RELEVANCE) == 0.0


def test_documents_from_chunks_keeps_each_documents_best_position():
    assert documents_from_chunks(["a", "b", "a", "c", "b"]) == ["a", "b", "c"]


def test_percentile_interpolates_linearly_like_numpy():
    assert percentile([40, 10, 30, 20], 50) == pytest.approx(25.0)
    # position (4 - 1) * 0.95 = 2.85 -> 30 + 0.85 * (40 - 30)
    assert percentile([10, 20, 30, 40], 95) == pytest.approx(38.5)
    assert percentile([7], 95) == 7
    assert percentile([], 50) == 0.0


def test_aggregation_is_the_mean_over_queries_with_latency_percentiles():
    aggregated = metrics_aggregate([{"hit@1": 1.0, "mrr@10": 1.0}, {"hit@1": 0.0, "mrr@10": 0.5}], [10.0, 30.0])
    assert aggregated == {"hit@1": 0.5, "mrr@10": 0.75, "p50_ms": 20.0, "p95_ms": 29.0, "queries": 2}
