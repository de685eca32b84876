"""The enrichment field's BM25 in retrieval: added down-weighted to the body's, under the same filter."""

import pytest

from core.errors import InvalidInput
from knowledge.enrichment.services import chunks_enrich
from knowledge.ingestion.readers import ReadDocument
from knowledge.services import documents_ingest
from retrieval.config import SearchConfig
from retrieval.filters import RetrievalFilter
from retrieval.request import AnswerRequest
from retrieval.search import chunk_search
from retrieval.stages.retrieve.enrichment import enrichment_bm25_search, fields_combine
from tests.conftest import BIKE
from tests.factories import SourceFactory
from tests.retrieval.doubles import ScriptedLLM

# "repair" and "mend" appear in no document: only the bicycle chunk's questions use them.
QUESTIONS = {"questions": ["How do I repair a flat bicycle tyre?", "How to mend an inner tube?"]}


def questions_for_bike(messages):
    return QUESTIONS if "puncture" in messages[-1]["content"] else {"questions": ["What does this say?"]}


@pytest.fixture
def enriched(corpus):
    chunks_enrich(tenant_id=corpus.pk, llm=ScriptedLLM(structured_reply=questions_for_bike), questions=2)
    return corpus


def lexical(tenant, query, weight, **kwargs):
    config = SearchConfig.for_tenant(tenant, enrichment_weight=weight)
    return chunk_search(
        AnswerRequest(question=query, k=5, mode="lexical", **kwargs), tenant=tenant, config=config
    ).results


def test_a_chunk_whose_questions_use_the_query_s_words_is_found_only_with_the_field_on(enriched):
    assert lexical(enriched, "repair", 0.0) == []

    results = lexical(enriched, "repair", 0.3)

    assert [r.chunk.version.document.external_id for r in results] == [BIKE.external_id]
    parts = results[0].components["lexical"]
    assert parts["body"] == 0 and parts["enrichment"] > 0
    assert parts["score"] == pytest.approx(0.3 * parts["enrichment"], abs=1e-5)


def test_the_field_score_is_added_down_weighted_to_the_body_score_and_shown_in_the_results(enriched):
    off = lexical(enriched, "bicycle tyre repair", 0.0)
    on = lexical(enriched, "bicycle tyre repair", 0.5)

    assert on[0].chunk.pk == off[0].chunk.pk
    parts = on[0].components["lexical"]
    assert parts["body"] == pytest.approx(off[0].components["lexical"]["score"], abs=1e-5)
    assert parts["score"] == pytest.approx(parts["body"] + 0.5 * parts["enrichment"], abs=1e-5)
    assert "enrichment" not in off[0].components["lexical"]


def test_the_search_api_shows_the_field_score_in_each_result_s_components(enriched, member):
    from tests.api.conftest import client_for

    enriched.retrieval_config = {"enrichment_weight": 0.5}
    enriched.save()

    response = client_for(member).post("/api/v1/search/", {"query": "repair my bicycle", "k": 3}, format="json")

    assert response.status_code == 200
    top = response.json()["results"][0]
    assert top["document"] == BIKE.external_id
    assert top["components"]["lexical"]["enrichment"] > 0 and top["components"]["lexical"]["body"] > 0


def test_the_field_never_returns_another_tenant_s_chunks(enriched, other_tenant_corpus):
    chunks_enrich(tenant_id=other_tenant_corpus.pk, llm=ScriptedLLM(structured_reply=QUESTIONS), questions=2)

    found = enrichment_bm25_search(where=RetrievalFilter.for_tenant(enriched), query="repair mend secret", limit=50)

    assert found and all(r.chunk.tenant_id == enriched.pk for r in lexical(enriched, "repair mend secret", 1.0))
    theirs = enrichment_bm25_search(
        where=RetrievalFilter.for_tenant(other_tenant_corpus), query="repair mend secret", limit=50
    )
    assert not {c for c, _ in found} & {c for c, _ in theirs}


def test_the_field_applies_the_source_and_version_filters(enriched):
    notes = SourceFactory(tenant=enriched, name="notes")
    documents_ingest(
        tenant=enriched,
        source=notes,
        documents=[ReadDocument(external_id="notes/bike", title="Bike notes", text="Carry a spare inner tube.")],
    )
    chunks_enrich(tenant_id=enriched.pk, llm=ScriptedLLM(structured_reply=QUESTIONS), questions=2)
    assert len(lexical(enriched, "repair", 1.0)) == 2

    only_notes = lexical(enriched, "repair", 1.0, source_ids=[notes.pk])
    assert [r.chunk.version.document.external_id for r in only_notes] == ["notes/bike"]

    # A new version of the bicycle page: its old chunk (enriched) no longer answers by default.
    documents_ingest(
        tenant=enriched, source=notes, documents=[ReadDocument(external_id="notes/bike", title="Bike", text="Gone.")]
    )
    assert [r.chunk.version.document.external_id for r in lexical(enriched, "repair", 1.0)] == [BIKE.external_id]


def test_the_field_answers_from_an_old_version_when_asked_as_of_a_date_it_was_current(enriched):
    from datetime import UTC, date, datetime

    later = SourceFactory(tenant=enriched, name="later")
    old = ReadDocument(
        external_id="later/bike", title="Bike", text="Pumps and valves.", published_at=datetime(2023, 4, 3, tzinfo=UTC)
    )
    documents_ingest(tenant=enriched, source=later, documents=[old])
    chunks_enrich(tenant_id=enriched.pk, llm=ScriptedLLM(structured_reply=QUESTIONS), questions=2)
    new = ReadDocument(
        external_id="later/bike", title="Bike", text="Gone.", published_at=datetime(2025, 4, 2, tzinfo=UTC)
    )
    documents_ingest(tenant=enriched, source=later, documents=[new])

    def found(**kwargs):
        return {r.chunk.version.document.external_id for r in lexical(enriched, "mend", 1.0, **kwargs)}

    assert "later/bike" not in found()
    assert "later/bike" in found(as_of=date(2024, 1, 1))
    assert "later/bike" not in found(as_of=date(2023, 1, 1))


def test_fields_combine_adds_the_weighted_field_over_the_union_of_both_lists():
    ranking, parts = fields_combine([(1, 4.0), (2, 3.0)], [(3, 10.0), (2, 2.0)], weight=0.5, limit=3)

    assert ranking == [(3, 5.0), (1, 4.0), (2, 4.0)]  # the tie keeps the body's order
    assert parts[3] == {"body": 0.0, "enrichment": 10.0} and parts[2] == {"body": 3.0, "enrichment": 2.0}


@pytest.mark.parametrize("bad", [-0.1, 2.5, "high", True])
def test_a_bad_enrichment_weight_is_a_clear_error(corpus, bad):
    with pytest.raises(InvalidInput, match="enrichment_weight"):
        SearchConfig.from_dict({"enrichment_weight": bad})
    corpus.retrieval_config = {"enrichment_weight": bad}
    with pytest.raises(InvalidInput):
        chunk_search(AnswerRequest(question="pasta", k=3), tenant=corpus)
