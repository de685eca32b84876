import pytest

from core.errors import InvalidInput
from retrieval.search import chunk_search


def test_hybrid_search_returns_the_chunk_that_answers_the_question(corpus):
    response = chunk_search(tenant=corpus, query="how long do I boil spaghetti?", k=3)
    top = response.results[0]
    assert top.chunk.version.document.external_id == "recipes/pasta"
    assert "nine to eleven minutes" in top.chunk.text
    assert set(top.components) == {"lexical", "dense"}
    assert {"embed_ms", "lexical_ms", "dense_ms", "total_ms"} <= set(response.timings_ms)


def test_search_never_returns_another_tenants_chunks(corpus, other_tenant_corpus):
    for mode in ("hybrid", "lexical", "dense"):
        response = chunk_search(tenant=corpus, query="secret bicycle tyre puncture patch", k=50, mode=mode)
        assert response.results
        assert all(r.chunk.tenant_id == corpus.pk for r in response.results)


def test_an_empty_query_is_rejected(corpus):
    with pytest.raises(InvalidInput):
        chunk_search(tenant=corpus, query="   ", k=3)


def test_a_source_filter_keeps_only_that_sources_chunks_in_every_mode(corpus):
    from knowledge.ingestion.readers import ReadDocument
    from knowledge.services import documents_ingest
    from tests.factories import SourceFactory

    notes = SourceFactory(tenant=corpus, name="notes")
    documents_ingest(
        tenant=corpus,
        source=notes,
        documents=[
            ReadDocument(external_id="notes/pasta", title="Pasta notes", text="Boil spaghetti in salted water.")
        ],
    )
    for mode in ("hybrid", "lexical", "dense"):
        results = chunk_search(tenant=corpus, query="boil spaghetti", k=10, mode=mode, source_ids=[notes.pk]).results
        assert [r.chunk.version.document.external_id for r in results] == ["notes/pasta"]


def test_the_fusion_can_be_chosen_per_tenant(corpus):
    corpus.retrieval_config = {"fusion": "rrf", "rrf_k": 60}
    corpus.save()
    response = chunk_search(tenant=corpus, query="how long do I boil spaghetti?", k=3)
    assert response.config.fusion == "rrf"
    assert response.results[0].score == pytest.approx(
        sum(1 / (60 + c["rank"]) for c in response.results[0].components.values())
    )
    corpus.retrieval_config = {"fusion": "nonsense"}
    with pytest.raises(InvalidInput):
        chunk_search(tenant=corpus, query="pasta", k=3)
