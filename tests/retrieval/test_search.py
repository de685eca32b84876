import pytest

from knowledge.errors import InvalidInput
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
