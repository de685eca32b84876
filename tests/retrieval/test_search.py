import pytest

from core.errors import InvalidInput
from retrieval.request import AnswerRequest
from retrieval.search import chunk_search


def test_hybrid_search_returns_the_chunk_that_answers_the_question(corpus):
    response = chunk_search(AnswerRequest(question="how long do I boil spaghetti?", k=3), tenant=corpus)
    top = response.results[0]
    assert top.chunk.version.document.external_id == "recipes/pasta"
    assert "nine to eleven minutes" in top.chunk.text
    assert set(top.components) == {"lexical", "dense"}
    assert {"embed_ms", "lexical_ms", "dense_ms", "total_ms"} <= set(response.timings_ms)


def test_search_never_returns_another_tenants_chunks(corpus, other_tenant_corpus):
    for mode in ("hybrid", "lexical", "dense"):
        response = chunk_search(
            AnswerRequest(question="secret bicycle tyre puncture patch", k=50, mode=mode), tenant=corpus
        )
        assert response.results
        assert all(r.chunk.tenant_id == corpus.pk for r in response.results)


def test_an_empty_query_is_rejected(corpus):
    with pytest.raises(InvalidInput):
        chunk_search(AnswerRequest(question="   ", k=3), tenant=corpus)


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
        results = chunk_search(
            AnswerRequest(question="boil spaghetti", k=10, mode=mode, source_ids=[notes.pk]), tenant=corpus
        ).results
        assert [r.chunk.version.document.external_id for r in results] == ["notes/pasta"]


def test_the_fusion_can_be_chosen_per_tenant(corpus):
    corpus.retrieval_config = {"fusion": "rrf", "rrf_k": 60}
    corpus.save()
    response = chunk_search(AnswerRequest(question="how long do I boil spaghetti?", k=3), tenant=corpus)
    assert response.config.fusion == "rrf"
    assert response.results[0].score == pytest.approx(
        sum(1 / (60 + c["rank"]) for c in response.results[0].components.values())
    )
    corpus.retrieval_config = {"fusion": "nonsense"}
    with pytest.raises(InvalidInput):
        chunk_search(AnswerRequest(question="pasta", k=3), tenant=corpus)


def test_embedding_the_query_during_the_lexical_search_finds_the_same_candidates_as_one_after_the_other(corpus):
    from retrieval.config import SearchConfig
    from retrieval.filters import RetrievalFilter
    from retrieval.stages.retrieve.candidates import candidates_retrieve
    from retrieval.types import QueryPlan

    plan = QueryPlan.from_question("how do I patch a bicycle tyre puncture?")
    where = RetrievalFilter.for_tenant(corpus)
    kwargs = {"where": where, "embedder": corpus.embedder, "mode": "hybrid", "config": SearchConfig(), "limit": 10}
    overlapped, overlapped_ms = candidates_retrieve(plan, concurrent=True, **kwargs)
    sequential, sequential_ms = candidates_retrieve(plan, concurrent=False, **kwargs)

    assert set(overlapped.lists) == {"lexical", "dense"}
    for name, ranking in sequential.lists.items():
        assert [item for item, _ in overlapped.lists[name]] == [item for item, _ in ranking]
        assert [score for _, score in overlapped.lists[name]] == pytest.approx([score for _, score in ranking])
    assert {"lexical_ms", "embed_ms", "embed_wait_ms", "overlap_ms", "dense_ms"} <= set(overlapped_ms)
    assert "overlap_ms" not in sequential_ms


@pytest.mark.django_db(transaction=True)
def test_outside_a_transaction_the_dense_side_runs_on_its_own_connection_with_the_same_candidates(
    corpus, other_tenant_corpus
):
    from django.db import connection

    from core.rls import tenant_context
    from retrieval.config import SearchConfig
    from retrieval.filters import RetrievalFilter
    from retrieval.stages.retrieve.candidates import candidates_retrieve
    from retrieval.types import QueryPlan

    plan = QueryPlan.from_question("how do I patch a bicycle tyre puncture?")
    where = RetrievalFilter.for_tenant(corpus)
    kwargs = {"where": where, "embedder": corpus.embedder, "mode": "hybrid", "config": SearchConfig(), "limit": 10}
    assert not connection.in_atomic_block
    with tenant_context(corpus.pk):
        concurrent, concurrent_ms = candidates_retrieve(plan, concurrent=True, **kwargs)
        sequential, _ = candidates_retrieve(plan, concurrent=False, **kwargs)

    assert "dense_wait_ms" in concurrent_ms and "overlap_ms" in concurrent_ms
    assert concurrent.lists["dense"]
    for name, ranking in sequential.lists.items():
        assert [item for item, _ in concurrent.lists[name]] == [item for item, _ in ranking]


@pytest.mark.django_db(transaction=True)
def test_the_dense_sides_worker_runs_under_the_callers_row_level_security_scope(corpus, other_tenant_corpus):
    from core.rls import tenant_context
    from retrieval.config import SearchConfig
    from retrieval.filters import RetrievalFilter
    from retrieval.stages.retrieve.candidates import candidates_retrieve
    from retrieval.types import QueryPlan

    plan = QueryPlan.from_question("how do I patch a bicycle tyre puncture?")
    where = RetrievalFilter.for_tenant(corpus)  # a query that names the wrong tenant ...
    with tenant_context(other_tenant_corpus.pk):  # ... inside the other tenant's scope
        candidates, timings = candidates_retrieve(
            plan, where=where, embedder=corpus.embedder, mode="hybrid", config=SearchConfig(), limit=10
        )
    assert "dense_wait_ms" in timings
    assert candidates.lists == {"lexical": [], "dense": []}


def test_search_results_with_their_document_and_source_are_fetched_in_one_query(corpus, django_assert_num_queries):
    from retrieval.config import SearchConfig
    from retrieval.filters import RetrievalFilter
    from retrieval.stages.fuse import candidates_fuse, results_fetch
    from retrieval.stages.retrieve.candidates import candidates_retrieve
    from retrieval.types import QueryPlan

    plan = QueryPlan.from_question("bicycle tyre, pasta water and expense receipts")
    candidates, _ = candidates_retrieve(
        plan,
        where=RetrievalFilter.for_tenant(corpus),
        embedder=corpus.embedder,
        mode="hybrid",
        config=SearchConfig(),
        limit=10,
    )
    ranking = candidates_fuse(candidates, SearchConfig())
    assert len(ranking) >= 3
    with django_assert_num_queries(1):
        results = results_fetch(tenant=corpus, ranking=ranking, candidates=candidates, k=10)
        shown = [r.as_dict() for r in results]
    assert [row["chunk_id"] for row in shown] == [item for item, _ in ranking[:10]]
    assert {row["source"] for row in shown} == {"handbook"}
    assert all(row["text"] and row["document"] and row["version"] == 1 for row in shown)


def test_result_rows_are_never_loaded_for_another_tenants_chunk_ids(corpus, other_tenant_corpus):
    from knowledge.models import Chunk
    from retrieval.stages.fetch import chunks_load

    theirs = list(Chunk.objects.for_tenant(other_tenant_corpus).values_list("pk", flat=True))
    ours = list(Chunk.objects.for_tenant(corpus).values_list("pk", flat=True))
    loaded = chunks_load(tenant=corpus, chunk_ids=theirs + ours)
    assert sorted(loaded) == sorted(ours)
    chunk = loaded[ours[0]]
    assert len(chunk.embedding) == 384  # columns left out of the narrow query still load on demand
