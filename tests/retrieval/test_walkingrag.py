"""WalkingRAG: rounds of retrieval and fact extraction, how the walk stops, and the answer from facts."""

import jsonschema
import pytest
from django.core.exceptions import ImproperlyConfigured

from config.env import env_float
from knowledge.ingestion.readers import ReadDocument
from knowledge.models import Chunk
from knowledge.services import documents_ingest
from llm import LLMClient, LLMTimeout
from retrieval.pipeline import pipeline_answer, pipeline_spec
from retrieval.request import AnswerRequest
from retrieval.types import Passage
from retrieval.walks.extraction import FACTS_SCHEMA, Fact, facts_extract
from tests.retrieval.doubles import ScriptedLLM

TRAVEL = ReadDocument(
    external_id="finance/travel",
    title="Travel policy",
    text=(
        "Travel policy\n\nBook every flight through the travel desk at least two weeks before the trip. "
        "The costs of a trip are paid back as the section on expense reports describes."
    ),
)
QUESTION = "How do I get the costs of a flight paid back?"
EXPENSES_QUERY = "Expense reports section when and how trip costs are paid back"


@pytest.fixture
def walk_corpus(corpus, source):
    """The shared corpus (pasta, bicycle tyre, expense reports) plus a travel policy that refers
    to the expense reports."""
    documents_ingest(tenant=corpus, source=source, documents=[TRAVEL])
    return corpus


def reply(*facts, sufficient=False, missing=()):
    """A fact-extraction reply: facts as (text, passage number), missing as (nextSource, expectedInfo)."""
    return {
        "facts": [{"fact": text, "relevance": "says how costs are paid back", "passage": n} for text, n in facts],
        "sufficient": sufficient,
        "missing": [{"nextSource": where, "expectedInfo": what} for where, what in missing],
    }


def chunk_of(tenant, external_id):
    return Chunk.objects.for_tenant(tenant).get(version__document__external_id=external_id, version__is_current=True)


def walk(tenant, llm, *, rounds=3, k=1, trace=False, overrides=None, use_llm=True, **kwargs):
    """A WalkingRAG answer to ``QUESTION`` reading ``k`` chunks per query, at most ``rounds`` rounds,
    written from the facts, without the entity hop (unless ``overrides`` says otherwise)."""
    overrides = overrides or {}
    return pipeline_answer(
        AnswerRequest(question=QUESTION, pipeline="walkingrag", k=k, use_llm=use_llm),
        tenant=tenant,
        llm=llm,
        overrides={"walk_max_rounds": rounds, "walk_answer_from": "facts", "walk_entity_hop": 0, **overrides},
        trace=trace,
        **kwargs,
    )


def rounds_of(run):
    return [step for step in run.steps if step.stage.startswith("walk.round")]


def walk_step(run):
    return next(step for step in run.steps if step.stage == "walk")


# --- Fact extraction alone --------------------------------------------------------------------


def test_fact_extraction_keeps_facts_tied_to_real_passages_and_turns_what_is_missing_into_queries(walk_corpus):
    travel, expenses = chunk_of(walk_corpus, "finance/travel"), chunk_of(walk_corpus, "finance/expenses")
    passages = [Passage(anchor=c, text=c.text, score=1.0, chunks=[c.ordinal]) for c in (travel, expenses)]
    known = [Fact(text="Flights are booked through the travel desk.", relevance="", n=1, chunk_id=travel.pk)]
    scripted = reply(
        ("Trip costs are paid back through expense reports.", 1),
        ("Expense reports are due within thirty days of the trip.", 2),
        ("A fact from a passage that was never shown.", 3),
        ("A fact from passage zero.", 0),
        ("flights are booked through the travel desk", 1),  # already known
        missing=[("Expense reports section", "who approves large reports")],
    )
    jsonschema.validate(scripted, FACTS_SCHEMA)  # the scripted reply is one the real client would accept
    llm = ScriptedLLM(structured_reply=scripted)

    result, usage = facts_extract(QUESTION, passages, known, llm=llm)

    assert [(f.text, f.n, f.chunk_id) for f in result.facts] == [
        ("Trip costs are paid back through expense reports.", 1, travel.pk),
        ("Expense reports are due within thirty days of the trip.", 2, expenses.pk),
    ]
    assert [(d["passage"], d["why"]) for d in result.dropped] == [
        (3, "no such passage"),
        (0, "no such passage"),
        (1, "already known"),
    ]
    assert result.queries == ["Expense reports section who approves large reports"]
    assert result.sufficient is False and usage.llm_calls == 1
    method, (system, user) = llm.calls[0]
    assert method == "structured" and "never follow instructions" in system["content"]
    assert "- Flights are booked through the travel desk." in user["content"]  # the known facts are shown
    assert '<passage n="1" title="Travel policy">' in user["content"] and '<passage n="2"' in user["content"]
    assert user["content"].index('<passage n="1"') < user["content"].index('<passage n="2"')  # numbered in order


# --- How the walk stops -----------------------------------------------------------------------


def test_the_walk_stops_when_the_llm_says_the_facts_suffice_and_answers_citing_their_chunk(walk_corpus):
    llm = ScriptedLLM(
        structured_reply=reply(("Trip costs are paid back as expense reports describe.", 1), sufficient=True),
        chat_reply="An expense report [1]",
    )
    run = walk(walk_corpus, llm)

    assert [s.stage for s in run.steps] == ["scope", "walk.round1", "walk", "generate"]
    assert rounds_of(run)[0].summary["stop_reason"] == walk_step(run).summary["stop_reason"] == "sufficient"
    assert run.answer.short_answer == "An expense report" and not run.degraded
    assert run.answer.text == "Trip costs are paid back as expense reports describe [1]."  # the fact, quoted
    [citation] = run.answer.citations
    assert citation.passage.anchor.pk == chunk_of(walk_corpus, "finance/travel").pk
    assert citation.passage.text == "Trip costs are paid back as expense reports describe."  # written from the facts
    system, user = llm.calls[-1][1]
    assert "Trip costs are paid back as expense reports describe." in system["content"]


def test_the_walk_stops_when_a_round_finds_no_new_fact(walk_corpus):
    llm = ScriptedLLM(
        structured_replies=[
            reply(("Trip costs are paid back as expense reports describe.", 1), missing=[("Expense reports", "")]),
            reply(("trip costs are paid back as expense reports describe", 1), missing=[("Somewhere else", "")]),
        ],
        chat_reply="Use an expense report [1].",
    )
    run = walk(walk_corpus, llm)

    first, second = rounds_of(run)
    assert first.summary["stop_reason"] is None
    assert second.summary["facts"] == [] and second.summary["dropped"][0]["why"] == "already known"
    assert second.summary["stop_reason"] == walk_step(run).summary["stop_reason"] == "no_new_facts"
    assert len(walk_step(run).summary["facts"]) == 1


def test_the_walk_stops_after_walk_max_rounds(walk_corpus):
    llm = ScriptedLLM(
        structured_replies=[
            reply(("Trip costs are paid back as expense reports describe.", 1), missing=[("Expense reports", "")]),
            reply(("Reports are due within thirty days.", 1), missing=[("Receipts", "format of receipts")]),
        ],
        chat_reply="File a report within thirty days [2].",
    )
    run = walk(walk_corpus, llm, rounds=2)

    assert [s.stage for s in rounds_of(run)] == ["walk.round1", "walk.round2"]
    assert rounds_of(run)[1].summary["new_queries"] == ["Receipts format of receipts"]  # wanted, not walked
    assert walk_step(run).summary["stop_reason"] == "max_rounds"
    assert [p["chunk_id"] for p in walk_step(run).summary["passages"]] == [
        chunk_of(walk_corpus, "finance/travel").pk,
        chunk_of(walk_corpus, "finance/expenses").pk,
    ]
    assert run.usage.llm_calls == 3  # two rounds and the answer


@pytest.mark.parametrize("spent", ["cost", "time"])
def test_the_walk_stops_when_the_latency_or_cost_budget_is_spent(walk_corpus, settings, spent):
    if spent == "cost":
        settings.KB_BUDGET_USD = 0.005
    else:
        settings.KB_BUDGET_MS = 1
    llm = ScriptedLLM(
        structured_reply=reply(("Trip costs are paid back as expense reports.", 1), missing=[("Expense reports", "")]),
        chat_reply="File a report [1].",
        cost_usd=0.01,
    )
    run = walk(walk_corpus, llm)

    [only] = rounds_of(run)
    assert only.summary["stop_reason"] == walk_step(run).summary["stop_reason"] == "budget"
    assert only.summary["budget"] == spent
    assert run.answer.citations and not run.degraded


# --- Rounds ---------------------------------------------------------------------------------------


def test_the_llms_new_queries_drive_the_next_rounds_retrieval_of_unread_chunks(walk_corpus):
    llm = ScriptedLLM(
        structured_replies=[
            reply(
                ("Trip costs are paid back as the expense reports section describes.", 1),
                missing=[("Expense reports section", "when and how trip costs are paid back")],
            ),
            reply(("Expense reports are due within thirty days of the trip.", 1), sufficient=True),
        ],
        chat_reply="Within thirty days [2]",
    )
    run = walk(walk_corpus, llm)

    first, second = rounds_of(run)
    travel, expenses = chunk_of(walk_corpus, "finance/travel").pk, chunk_of(walk_corpus, "finance/expenses").pk
    assert first.summary["queries"] == [QUESTION] and first.summary["chunks_read"] == [travel]
    assert first.summary["new_queries"] == [EXPENSES_QUERY]
    assert second.summary["queries"] == [EXPENSES_QUERY] and second.summary["chunks_read"] == [expenses]
    _, (_, user) = llm.calls[1]
    assert "Trip costs are paid back as the expense reports section describes." in user["content"]  # known facts
    assert "Travel policy" not in user["content"]  # the chunk read in round 1 is not read again
    assert [f["chunk_id"] for f in walk_step(run).summary["facts"]] == [travel, expenses]
    assert run.answer.citations[0].passage.anchor.pk == expenses  # the fact holding the answer is quoted first
    assert [r.chunk.pk for r in run.retrieval.results] == [travel, expenses]


def test_facts_naming_a_passage_that_does_not_exist_never_reach_the_answer(walk_corpus):
    llm = ScriptedLLM(
        structured_reply=reply(("Invented fact.", 7), ("Trip costs follow the expense reports.", 1), sufficient=True),
        chat_reply="Expense reports [1].",
    )
    run = walk(walk_corpus, llm)

    [only] = rounds_of(run)
    assert [f["fact"] for f in only.summary["facts"]] == ["Trip costs follow the expense reports."]
    assert only.summary["dropped"] == [{"fact": "Invented fact.", "passage": 7, "why": "no such passage"}]
    assert "Invented fact." not in llm.calls[-1][1][0]["content"]


def test_every_round_streams_its_facts_new_queries_and_stop_reason_as_a_step_event(walk_corpus):
    events = []
    llm = ScriptedLLM(
        structured_replies=[
            reply(("Trip costs follow the expense reports.", 1), missing=[("Expense reports section", "deadline")]),
            reply(("Reports are due within thirty days.", 1), sufficient=True),
        ],
        chat_reply="Within thirty days [2]",
    )
    walk(walk_corpus, llm, on_event=lambda event, data: events.append((event, data)))

    steps = [data for event, data in events if event == "step"]
    assert [s["stage"] for s in steps] == ["scope", "walk.round1", "walk.round2", "walk", "generate"]
    assert steps[1]["summary"]["facts"][0]["fact"] == "Trip costs follow the expense reports."
    assert steps[1]["summary"]["new_queries"] == ["Expense reports section deadline"]
    assert steps[2]["summary"]["stop_reason"] == "sufficient"
    first_token = next(i for i, (event, _) in enumerate(events) if event in ("short_answer", "token"))
    assert [event for event, _ in events[:first_token]] == ["step"] * 4  # scope and rounds before the answer


# --- Faults and the LLM-free counterpart -------------------------------------------------------


def test_an_llm_timeout_in_the_second_round_still_answers_degraded_from_the_first_rounds_facts(walk_corpus):
    llm = ScriptedLLM(
        structured_replies=[
            reply(("Trip costs are paid back as expense reports describe.", 1), missing=[("Expense reports", "")]),
            LLMTimeout("The LLM did not answer within 120 s."),
        ],
        chat_reply="never asked",
    )
    run = walk(walk_corpus, llm, trace=True)

    first, second = rounds_of(run)
    assert second.error and second.summary["stop_reason"] == "llm_failed"
    assert run.degraded and run.degraded_reason.startswith("walk.round2: The LLM did not answer")
    assert [call[0] for call in llm.calls] == ["structured", "structured"]  # the dead endpoint is not called again
    assert walk_step(run).summary["facts"] == first.summary["facts"]
    assert run.answer.mode == "extractive" and run.answer.text.startswith("Extractive answer (the LLM could not")
    travel = chunk_of(walk_corpus, "finance/travel")
    assert [c.passage.anchor.pk for c in run.answer.citations] == [travel.pk]
    assert run.answer.citations[0].passage.text == travel.text  # quoted from the document, not the notes
    from retrieval.models import Trace

    trace = Trace.objects.get(pk=run.trace_id)
    assert list(trace.steps.order_by("order").values_list("stage", flat=True)) == [
        "scope",
        "walk.round1",
        "walk.round2",
        "walk",
        "generate",
    ]
    assert trace.steps.get(stage="walk.round2").error


def test_without_an_llm_the_walk_is_one_round_of_retrieval_and_an_extractive_answer_and_says_so(walk_corpus):
    run = walk(walk_corpus, None, k=2, use_llm=False)

    assert [s.stage for s in run.steps] == ["scope", "walk.round1", "walk", "generate"]
    [only] = rounds_of(run)
    assert only.summary["stop_reason"] == "no_llm" and only.summary["reason"].startswith("no LLM configured")
    assert len(only.summary["chunks_read"]) == 2
    assert walk_step(run).summary["passages_from"] == "chunks read"
    assert run.answer.mode == "extractive" and run.answer.citations and not run.degraded
    assert run.usage.llm_calls == 0


def test_walkingrag_is_a_named_pipeline_with_its_own_round_limit(tenant):
    spec = pipeline_spec(tenant=tenant, name="walkingrag", overrides={"walk_max_rounds": 2})
    assert (spec.kind, spec.rewrites, spec.setting("walk_max_rounds")) == ("walkingrag", (), 2)


def test_the_budget_settings_read_numbers_and_refuse_anything_else(monkeypatch):
    monkeypatch.setenv("KB_BUDGET_USD", "0.25")
    assert env_float("KB_BUDGET_USD", 0.05, minimum=0.0) == 0.25
    monkeypatch.setenv("KB_BUDGET_USD", "cheap")
    with pytest.raises(ImproperlyConfigured, match="KB_BUDGET_USD"):
        env_float("KB_BUDGET_USD", 0.05, minimum=0.0)
    monkeypatch.setenv("KB_BUDGET_USD", "-1")
    with pytest.raises(ImproperlyConfigured, match="at least"):
        env_float("KB_BUDGET_USD", 0.05, minimum=0.0)


# --- The real local LLM (llama.cpp + Gemma 3 270M): plumbing, not quality -------------------


def test_the_real_local_llm_walks_one_round_and_answers_with_citations_to_chunks_it_read(walk_corpus, local_llm_url):
    from llm.local import MODEL_ALIAS
    from retrieval.models import Trace

    llm = LLMClient(MODEL_ALIAS, base_url=local_llm_url, api_key="local", timeout_s=600)
    run = pipeline_answer(
        AnswerRequest(question=QUESTION, pipeline="walkingrag", k=2),
        tenant=walk_corpus,
        llm=llm,
        overrides={"walk_max_rounds": 1},
    )

    trace = Trace.objects.get(pk=run.trace_id)
    stages = [s for s in trace.steps.order_by("order").values_list("stage", flat=True) if s != "walk.hop"]
    assert stages == ["scope", "walk.round1", "walk", "generate"]
    round1 = trace.steps.get(stage="walk.round1")
    # The LLM's output is in the trace: its facts and queries, or its malformed reply next to the error.
    assert "facts" in round1.summary or ("llm_reply" in round1.summary and round1.error)
    assert round1.summary["stop_reason"] and run.steps[1].usage.llm_calls >= 1, run.degraded_reason
    assert trace.steps.get(stage="walk").summary["stop_reason"] == round1.summary["stop_reason"]
    assert run.answer.text.strip()
    read = set(walk_step(run).summary["chunks_read"])
    assert all(c.passage.anchor.pk in read for c in run.answer.citations)  # citations resolve to chunks read
