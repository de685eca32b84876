"""MaxScore top-k (``bm25_search(prune=True)``) returns exactly the exhaustive BM25 top-k."""

import random
from dataclasses import replace
from datetime import UTC, date, datetime

import pytest
from django.db.models import Max, Min

from knowledge.ingestion.readers import ReadDocument
from knowledge.ingestion.splitters import SingleChunkSplitter
from knowledge.models import Chunk, Document, Posting, TermStatistic
from knowledge.services import document_delete, documents_ingest, source_get_or_create
from retrieval.filters import RetrievalFilter
from retrieval.stages.retrieve import lexical
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


def _bounds(tenant) -> dict[str, tuple[int, int]]:
    return {
        lexeme: (max_tf, min_length)
        for lexeme, max_tf, min_length in TermStatistic.objects.for_tenant(tenant).values_list(
            "lexeme", "max_tf", "min_length"
        )
    }


def test_stored_bounds_are_the_extremes_of_freshly_ingested_postings(skewed):
    tenant = skewed[0]
    extremes = (
        Posting.objects.for_tenant(tenant)
        .filter(is_current=True)
        .values("lexeme")
        .annotate(max_tf=Max("tf"), min_length=Min("chunk_length"))
    )
    assert _bounds(tenant) == {row["lexeme"]: (row["max_tf"], row["min_length"]) for row in extremes}


def test_stored_bounds_still_cover_every_current_posting_after_new_versions_and_deletions(skewed):
    tenant, source = skewed
    rng = random.Random(5)
    documents = [ReadDocument(external_id=f"a{i}", title="", text=_text(rng)) for i in range(0, 30, 2)]
    documents_ingest(tenant=tenant, source=source, documents=documents, splitter=SingleChunkSplitter())
    for document in Document.objects.for_tenant(tenant).filter(external_id__in=["a1", "a3", "b4"]):
        document_delete(tenant=tenant, document_id=document.pk)
    bounds = _bounds(tenant)
    current = Posting.objects.for_tenant(tenant).filter(is_current=True)
    assert current.exists()
    for lexeme, tf, length in current.values_list("lexeme", "tf", "chunk_length"):
        assert tf <= bounds[lexeme][0] and length >= bounds[lexeme][1], lexeme


def test_pruning_as_of_a_date_ranks_old_versions_exactly(tenant, source, monkeypatch):
    # "zebrafish" leaves the current corpus with the old versions (its statistics row goes) and
    # comes back in one long chunk: its stored bounds then cover current chunks only, not the old
    # versions' many-zebrafish chunks, so as_of must not rely on them.
    monkeypatch.setattr(lexical, "SEED_POSTINGS", 1)
    old = [
        ReadDocument(
            external_id=f"d{i}",
            title="",
            text="gene zebrafish cell." if i < 10 else "zebrafish " * i + "cell.",
            published_at=datetime(2023, 1, 1, tzinfo=UTC),
        )
        for i in range(20)
    ]
    new = [
        replace(d, text="gene " + "axolotl " * (20 + i), published_at=datetime(2025, 1, 1, tzinfo=UTC))
        for i, d in enumerate(old)
    ]
    back = ReadDocument(external_id="back", title="", text="zebrafish gene " + "axolotl " * 40)
    for documents in (old, new, [back]):
        documents_ingest(tenant=tenant, source=source, documents=documents, splitter=SingleChunkSplitter())
    assert _bounds(tenant)["zebrafish"] == (1, 42)
    where = RetrievalFilter.for_tenant(tenant, as_of=date(2024, 1, 1))
    for limit in (1, 3, 10):
        exhaustive, pruned = _both(where=where, query="zebrafish gene", limit=limit)
        assert len(exhaustive) == limit
        assert _same_ranking(pruned, exhaustive), limit
