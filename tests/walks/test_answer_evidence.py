"""What a walk answers from: the chunks that yielded facts (not the model's paraphrase of them),
the chunk of each bridge entity the facts name and the question does not, then the other chunks
read."""

import pytest

from knowledge.ingestion.readers import ReadDocument
from knowledge.services import documents_ingest
from retrieval.pipeline import pipeline_answer
from retrieval.request import AnswerRequest
from tests.retrieval.doubles import ScriptedLLM
from tests.walks.scripts import QUESTION, TRAVEL_FACT, chunk_of, reply

EDGAR = ReadDocument(
    external_id="people/edgar-kaiser",
    title="Edgar Kaiser Sr.",
    text="Edgar Kaiser Sr.\n\nEdgar Fosburgh Kaiser Sr. was an American industrialist, the son of Henry J. Kaiser.",
)
HENRY = ReadDocument(
    external_id="people/henry-kaiser",
    title="Henry J. Kaiser",
    text="Henry J. Kaiser\n\nHenry John Kaiser founded Kaiser Aluminum and the Kaiser Shipyards in Richmond.",
)
BRIDGE_QUESTION = "Which aluminium company did the father of Edgar Kaiser Sr. found?"


def test_by_default_the_answer_is_written_from_the_text_of_the_chunks_that_yielded_facts(walk_corpus):
    llm = ScriptedLLM(structured_reply=reply((TRAVEL_FACT, 1), sufficient=True), chat_reply="An expense report [1]")
    run = pipeline_answer(
        AnswerRequest(question=QUESTION, pipeline="walkingrag", k=2),
        tenant=walk_corpus,
        llm=llm,
        overrides={"walk_entity_hop": 0},
    )
    travel = chunk_of(walk_corpus, "finance/travel")
    assert run.passages[0].anchor.pk == travel.pk and run.passages[0].text == travel.text
    assert len(run.passages) == 2  # filled up to k with the other chunk read
    walk = next(s for s in run.steps if s.stage == "walk").summary
    assert walk["passages_from"] == "fact chunks"
    prompt = " ".join(m["content"] for m in llm.calls[-1][1])
    assert "Book every flight through the travel desk" in prompt


@pytest.mark.parametrize(("fill", "expected"), [({}, 4), ({"walk_answer_fill": 3}, 3), ({"walk_answer_fill": 0}, 1)])
def test_other_chunks_read_fill_the_answer_up_to_k_or_walk_answer_fill_passages(walk_corpus, fill, expected):
    llm = ScriptedLLM(structured_reply=reply((TRAVEL_FACT, 1), sufficient=True), chat_reply="An expense report [1]")
    run = pipeline_answer(
        AnswerRequest(question=QUESTION, pipeline="walkingrag", k=4),
        tenant=walk_corpus,
        llm=llm,
        overrides={"walk_entity_hop": 0, **fill},
    )
    walk = next(s for s in run.steps if s.stage == "walk").summary
    assert len(walk["chunks_read"]) == 4
    assert len(run.passages) == expected
    assert run.passages[0].anchor.pk == chunk_of(walk_corpus, "finance/travel").pk  # the fact's chunk always


@pytest.fixture
def kaisers(tenant, source):
    documents_ingest(tenant=tenant, source=source, documents=[EDGAR, HENRY])
    return tenant


def test_the_entity_hop_reads_the_chunk_of_the_bridge_entity_the_question_does_not_name(kaisers):
    llm = ScriptedLLM(
        structured_reply=reply(("Edgar Kaiser Sr. was the son of Henry J. Kaiser.", 1), sufficient=True),
        chat_reply="Kaiser Aluminum [2]",
    )
    run = pipeline_answer(AnswerRequest(question=BRIDGE_QUESTION, pipeline="walkingrag", k=1), tenant=kaisers, llm=llm)
    hop = next(s for s in run.steps if s.stage == "walk.hop").summary
    henry = chunk_of(kaisers, "people/henry-kaiser")
    assert hop["entities"] == ["Henry J. Kaiser"] and hop["chunks_read"] == {"Henry J. Kaiser": henry.pk}
    assert [p.document.external_id for p in run.passages] == ["people/edgar-kaiser", "people/henry-kaiser"]
    assert "founded Kaiser Aluminum" in " ".join(m["content"] for m in llm.calls[-1][1])


def test_an_entity_whose_best_chunk_was_read_already_adds_nothing(kaisers):
    llm = ScriptedLLM(
        structured_reply=reply(("Edgar Kaiser Sr. was the son of Henry J. Kaiser.", 1), sufficient=True),
        chat_reply="Kaiser Aluminum [2]",
    )
    run = pipeline_answer(AnswerRequest(question=BRIDGE_QUESTION, pipeline="walkingrag", k=2), tenant=kaisers, llm=llm)
    hop = next(s for s in run.steps if s.stage == "walk.hop").summary
    assert hop["chunks_read"] == {"Henry J. Kaiser": None}
    assert len(run.passages) == 2


def test_a_kept_fact_is_linked_to_the_entities_it_names_and_the_graph_draws_them(kaisers):
    from retrieval.filters import retrieval_filter
    from retrieval.request import AnswerRequest
    from retrieval.walks.graph import document_graph, graph_svg
    from retrieval.walks.models import Fact

    llm = ScriptedLLM(
        structured_reply=reply(("Edgar Kaiser Sr. was the son of Henry J. Kaiser.", 1), sufficient=True),
        chat_reply="Kaiser Aluminum [2]",
    )
    pipeline_answer(AnswerRequest(question=BRIDGE_QUESTION, pipeline="walkingrag", k=1), tenant=kaisers, llm=llm)
    fact = Fact.objects.get(tenant=kaisers)
    assert fact.entities == ["Edgar Kaiser Sr.", "Henry J. Kaiser"]
    edgar = chunk_of(kaisers, "people/edgar-kaiser").version.document
    graph = document_graph(where=retrieval_filter(tenant=kaisers), document_id=edgar.pk)
    entities = sorted(node["label"] for node in graph.nodes.values() if node["kind"] == "entity")
    assert entities == ["Edgar Kaiser Sr.", "Henry J. Kaiser"]
    assert sum(1 for _a, _b, relation in graph.edges if relation == "names") == 2
    assert "Henry J. Kaiser" in graph_svg(graph)
