"""MaxScore top-k (``bm25_search(prune=True)``) returns exactly the exhaustive BM25 top-k."""

import random

import pytest

from knowledge.ingestion.readers import ReadDocument
from knowledge.ingestion.splitters import SingleChunkSplitter
from knowledge.models import Chunk
from knowledge.services import documents_ingest, source_get_or_create
from retrieval.stages.retrieve import lexical
from retrieval.stages.retrieve.filters import RetrievalFilter
from retrieval.stages.retrieve.lexical import bm25_search

# Zipf-like vocabulary: the first words are in most chunks (long postings), the last in a few.
WORDS = [
    "protein", "cell", "gene", "patient", "disease", "therapy", "receptor", "kinase", "mutation",
    "tumor", "insulin", "neuron", "virus", "antibody", "enzyme", "plasma", "cortex", "lipid",
    "ribosome", "telomere", "prion", "axolotl", "zebrafish", "cyclotron",
]  # fmt: skip
QUERIES = [
    "protein cell gene",
    "patient disease therapy receptor",
    "protein telomere",
    "cell prion axolotl zebrafish",
    "gene mutation tumor insulin neuron virus",
    "cyclotron protein cell gene patient",
    "antibody enzyme plasma cortex lipid ribosome",
    "unknownword protein",
]


def _text(rng: random.Random) -> str:
    words = []
    for _ in range(rng.randint(3, 14)):
        rank = min(int(rng.paretovariate(0.9)) - 1, len(WORDS) - 1)
        words.extend([WORDS[rank]] * rng.choice((1, 1, 1, 2, 3)))
    return " ".join(words) + "."


@pytest.fixture
def skewed(tenant, source):
    rng = random.Random(11)
    other = source_get_or_create(tenant=tenant, name="other")
    for src, prefix in ((source, "a"), (other, "b")):
        documents = [ReadDocument(external_id=f"{prefix}{i}", title="", text=_text(rng)) for i in range(30)]
        documents_ingest(tenant=tenant, source=src, documents=documents, splitter=SingleChunkSplitter())
    return tenant, source


def _both(**kwargs):
    return bm25_search(prune=False, **kwargs), bm25_search(prune=True, **kwargs)


def _same_ranking(pruned, exhaustive) -> bool:
    """Same chunks in the same order, scores equal up to floating-point summation order."""
    return [c for c, _ in pruned] == [c for c, _ in exhaustive] and [s for _, s in pruned] == pytest.approx(
        [s for _, s in exhaustive], rel=1e-12
    )


def test_pruned_top_k_equals_the_exhaustive_top_k(skewed, monkeypatch):
    where = RetrievalFilter.for_tenant(skewed[0])
    for seed_postings in (1, 20, 5000):  # seed = the rarest lexeme only ... every lexeme
        monkeypatch.setattr(lexical, "SEED_POSTINGS", seed_postings)
        for limit in (1, 3, 10, 40):
            for query in QUERIES:
                exhaustive, pruned = _both(where=where, query=query, limit=limit)
                assert exhaustive, query
                assert _same_ranking(pruned, exhaustive), (seed_postings, limit, query)


def test_pruning_applies_a_narrowing_filter_before_ranking(skewed, monkeypatch):
    monkeypatch.setattr(lexical, "SEED_POSTINGS", 5)
    tenant, source = skewed
    where = RetrievalFilter.for_tenant(tenant, source_ids=[source.pk])
    allowed = set(Chunk.objects.filter(tenant=tenant, version__document__source=source).values_list("id", flat=True))
    for query in QUERIES:
        exhaustive, pruned = _both(where=where, query=query, limit=5)
        assert _same_ranking(pruned, exhaustive), query
        assert {c for c, _ in pruned} <= allowed
        assert len(pruned) == min(5, len(exhaustive))


def test_pruned_weighted_lexemes_equal_the_exhaustive_ranking(skewed, monkeypatch):
    monkeypatch.setattr(lexical, "SEED_POSTINGS", 10)
    where = RetrievalFilter.for_tenant(skewed[0])
    terms = {"protein": 1.0, "cell": 0.4, "telomer": 0.7, "gene": 0.2, "prion": 0.5}
    exhaustive, pruned = _both(where=where, terms=terms, limit=7)
    assert len(exhaustive) == 7
    assert _same_ranking(pruned, exhaustive)


def test_queries_over_the_pruning_threshold_are_pruned_with_the_same_ranking(skewed, monkeypatch):
    where = RetrievalFilter.for_tenant(skewed[0])
    exhaustive = bm25_search(where=where, query=QUERIES[0], limit=10, prune=False)
    monkeypatch.setattr(lexical, "PRUNE_MIN_POSTINGS", 0)
    assert _same_ranking(bm25_search(where=where, query=QUERIES[0], limit=10), exhaustive)
