"""SuperRAG: the LLM scores every candidate, invented quotations are dropped, the best few answer."""

import re

import pytest

from knowledge.ingestion.readers import ReadDocument
from knowledge.services import documents_ingest
from llm import LLMBadOutput, LLMClient, LLMTimeout, LLMUnavailable
from retrieval.pipeline import pipeline_answer, pipeline_retrieve, pipeline_spec
from retrieval.request import AnswerRequest
from retrieval.stages.generate.cited import NOT_FOUND
from retrieval.stages.generate.extractive import DEGRADED_LABEL
from retrieval.stages.rerank.llm_scoring import (
    ScoredCandidate,
    candidates_keep,
    candidates_score,
    quote_find,
)
from retrieval.types import SearchResult
from tests.factories import SourceFactory
from tests.retrieval.doubles import ScriptedLLM

QUESTION = "How do I fix a flat bicycle tyre?"
ONE_BY_ONE = {"superrag_batch": 1}  # the seed's protocol: a call per candidate, with its quotation
QUOTE = "Patch the hole with glue and a rubber patch, then refit the tube and inflate to the printed pressure."


def grades(by_title: dict[str, dict], default: dict | None = None):
    """A ``structured_reply`` that grades a passage by the first title word found in its prompt."""

    def reply(messages):
        prompt = messages[-1]["content"]
        for word, value in by_title.items():
            if f'title="{word}' in prompt:
                return value
        return default or {"confidence": 1, "relevant_text": ""}

    return reply


def candidates(tenant, question=QUESTION):
    return pipeline_retrieve(AnswerRequest(question=question, k=3, use_llm=False), tenant=tenant).results


def stages(run):
    return [step.stage for step in run.steps]


def test_the_llm_grades_every_candidate_and_quotes_the_chunks_own_words(corpus):
    results = candidates(corpus)
    llm = ScriptedLLM(structured_reply=grades({"Fixing": {"confidence": 9, "relevant_text": QUOTE}}))
    scored = candidates_score(QUESTION, results, llm=llm, concurrency=2)
    assert len(llm.calls) == 3 and all(c.scored_by == "llm" for c in scored)
    by_document = {c.chunk.version.document.external_id: c for c in scored}
    assert by_document["howto/bike-tyre"].confidence == 0.9
    assert by_document["howto/bike-tyre"].relevant_text == QUOTE
    assert by_document["recipes/pasta"].confidence == 0.1 and by_document["recipes/pasta"].relevant_text == ""
    system, user = llm.calls[0][1]
    assert "0 = unrelated" in system["content"] and "10 = answers it fully" in system["content"]
    assert user["content"].startswith(f"The question: {QUESTION}")
    assert user["content"].count("<passage ") == 1 and user["content"].count("</passage>") == 1


def test_a_quotation_is_found_despite_different_whitespace_but_never_when_reworded():
    text = "Remove the wheel and lever\nthe tyre off the rim. Patch the hole."
    assert quote_find("Remove the wheel and lever the   tyre off", text) == "Remove the wheel and lever\nthe tyre off"
    assert quote_find('"Patch the hole."', text) == "Patch the hole."
    assert quote_find("", text) == ""
    assert quote_find("Remove the wheel and pry the tyre off", text) is None
    assert quote_find("patch the hole", text) is None  # case counts: a quotation is exact


def test_an_invented_quotation_is_dropped_and_the_passage_keeps_the_documents_words(corpus):
    invented = "Buy a new tyre at any bicycle shop; repairs are never worth it."
    llm = ScriptedLLM(
        structured_reply=grades({"Fixing": {"confidence": 8, "relevant_text": invented}}),
        chat_reply="Patch the inner tube [1].",
    )
    run = pipeline_answer(
        AnswerRequest(question=QUESTION, pipeline="superrag"), tenant=corpus, llm=llm, overrides=ONE_BY_ONE, trace=False
    )
    score = run.steps[stages(run).index("llm_score")]
    bike = next(c for c in run.answer.citations if c.passage.document.external_id == "howto/bike-tyre")
    assert score.summary["dropped_quotes"] == [{"chunk_id": bike.passage.anchor.pk, "quote": invented}]
    assert invented not in bike.passage.text and bike.passage.text in bike.passage.anchor.text
    assert not run.degraded


def test_the_threshold_keeps_only_the_top_k_most_confident_candidates():
    confidences = [0.9, 0.4, 0.7, 0.5, 0.8, 0.5]
    scored = [
        ScoredCandidate(result=SearchResult(chunk=None, score=1.0, rank=rank), confidence=confidence)
        for rank, confidence in enumerate(confidences, start=1)
    ]
    assert [c.confidence for c in candidates_keep(scored, keep=3, threshold=0.5)] == [0.9, 0.8, 0.7]
    assert [c.result.rank for c in candidates_keep(scored, keep=5, threshold=0.5)] == [1, 5, 3, 4, 6]
    assert candidates_keep(scored, keep=5, threshold=0.95) == []


def test_superrag_answers_from_the_kept_relevant_texts_with_citations_to_their_chunks(corpus):
    llm = ScriptedLLM(
        structured_reply=grades({"Fixing": {"confidence": 9, "relevant_text": QUOTE}}),
        chat_reply="Patch the hole with glue and a rubber patch [1].",
    )
    run = pipeline_answer(
        AnswerRequest(question=QUESTION, pipeline="superrag"), tenant=corpus, llm=llm, overrides=ONE_BY_ONE, trace=False
    )
    assert stages(run) == ["scope", "retrieve", "fuse", "llm_score", "pack", "generate"]
    score = run.steps[3].summary
    assert score["candidates"] == 3 and score["scored_by_llm"] == 3 and score["threshold"] == 0.5
    assert [confidence for _, confidence in score["kept"]] == [0.9]
    [citation] = run.answer.citations
    cited = citation.as_dict()
    assert (cited["document"], cited["version"], cited["text"]) == ("howto/bike-tyre", 1, QUOTE)
    assert cited["chunk_id"] == score["kept"][0][0] and cited["score"] == 0.9
    assert (
        f"[1] Fixing a flat bicycle tyre: {QUOTE}" in llm.calls[-1][1][0]["content"].splitlines()
    )  # the quotation only
    assert run.answer.mode == "llm" and run.usage.llm_calls == 4  # three gradings and the answer
    assert run.retrieval.results[0].chunk.pk == cited["chunk_id"]  # candidates reranked by confidence


def test_when_no_candidate_reaches_the_threshold_the_answer_names_the_sources_searched(corpus, source):
    garage = SourceFactory(tenant=corpus, name="garage")
    documents_ingest(
        tenant=corpus,
        source=garage,
        documents=[ReadDocument(external_id="garage/car", title="Car tyres", text="Check car tyre pressure monthly.")],
    )
    llm = ScriptedLLM(structured_reply={"confidence": 2, "relevant_text": ""}, chat_reply="unused")
    run = pipeline_answer(
        AnswerRequest(question=QUESTION, pipeline="superrag"), tenant=corpus, llm=llm, overrides=ONE_BY_ONE, trace=False
    )
    assert not run.answer.found and run.answer.citations == []
    assert run.answer.text == f"{NOT_FOUND} Sources searched: garage, handbook."
    assert all(method == "structured" for method, _ in llm.calls)  # no answer call without passages
    filtered = pipeline_answer(
        AnswerRequest(question=QUESTION, pipeline="superrag", source_ids=[garage.pk]),
        tenant=corpus,
        llm=llm,
        overrides=ONE_BY_ONE,
        trace=False,
    )
    assert filtered.answer.text.endswith("Sources searched: garage.")
    assert filtered.steps[-1].summary["sources"] == ["garage"]


def test_without_an_llm_fused_scores_and_best_sentences_stand_in_and_the_step_says_so(corpus):
    scored = candidates_score(QUESTION, candidates(corpus), llm=None, concurrency=None)
    assert scored[0].confidence == 1.0 and all(0 <= c.confidence <= 1 for c in scored)
    assert all(c.scored_by == "fused" and c.relevant_text in c.chunk.text for c in scored)
    assert scored[0].relevant_text and scored[0].relevant_text != scored[0].chunk.text.strip()  # one sentence

    run = pipeline_answer(
        AnswerRequest(question=QUESTION, pipeline="superrag", use_llm=False), tenant=corpus, trace=False
    )
    assert stages(run) == ["scope", "retrieve", "fuse", "llm_score", "pack", "generate"]
    assert run.steps[3].summary["mode"].startswith("no LLM: ")
    assert run.answer.mode == "extractive" and not run.degraded and run.usage.llm_calls == 0
    assert run.answer.citations[0].passage.document.external_id == "howto/bike-tyre"


@pytest.mark.parametrize("failure", [LLMTimeout("The LLM endpoint timed out."), LLMUnavailable("Connection refused.")])
def test_an_llm_failure_mid_scoring_still_answers_degraded_from_what_was_gathered(corpus, failure):
    llm = ScriptedLLM(
        structured_reply=grades({"Fixing": {"confidence": 9, "relevant_text": QUOTE}}, default=failure),
        chat_reply="unused",
    )
    run = pipeline_answer(
        AnswerRequest(question=QUESTION, pipeline="superrag"), tenant=corpus, llm=llm, overrides=ONE_BY_ONE
    )
    assert [method for method, _ in llm.calls] == ["structured", "structured"]  # the third was skipped
    score = run.steps[3]
    assert run.degraded and run.degraded_reason.startswith(f"llm_score: {failure}")
    assert score.error.startswith("2 of 3 scorings failed") and len(score.summary["failed"]) == 2
    assert [c["by"] for c in score.summary["scores"]] == ["llm", "fused", "fused"]
    assert run.answer.text.startswith(DEGRADED_LABEL) and run.answer.citations
    assert run.answer.citations[0].passage.text == QUOTE
    assert stages(run) == ["scope", "retrieve", "fuse", "llm_score", "pack", "generate"] and run.trace_id


def test_a_malformed_grading_keeps_the_fused_score_and_the_llm_still_answers(corpus):
    llm = ScriptedLLM(
        structured_reply=grades({"Fixing": {"confidence": 9, "relevant_text": QUOTE}}, default=LLMBadOutput("bad")),
        chat_reply="Patch the hole [1].",
    )
    run = pipeline_answer(
        AnswerRequest(question=QUESTION, pipeline="superrag"), tenant=corpus, llm=llm, overrides=ONE_BY_ONE, trace=False
    )
    assert len(llm.calls) == 4 and run.degraded  # every candidate was tried, then the answer
    assert run.answer.mode == "llm" and run.answer.citations


def test_the_superrag_pipeline_resolves_to_its_flow_with_fifty_candidates(tenant):
    spec = pipeline_spec(tenant=tenant, name="superrag")
    assert (spec.kind, spec.rewrites, spec.setting("superrag_candidates"), spec.setting("superrag_keep")) == (
        "superrag",
        (),
        50,
        5,
    )


# --- The real local LLM (llama.cpp + Gemma 3 270M): plumbing, not quality -------------------


def test_superrag_runs_end_to_end_with_the_real_local_llm(corpus, local_llm_url):
    from llm.local import MODEL_ALIAS
    from retrieval.models import Trace

    llm = LLMClient(MODEL_ALIAS, base_url=local_llm_url, api_key="local", concurrency=2, timeout_s=600)
    run = pipeline_answer(
        AnswerRequest(question=QUESTION, pipeline="superrag"),
        tenant=corpus,
        llm=llm,
        overrides={"superrag_candidates": 2, "superrag_threshold": 0.0, "superrag_batch": 2},
    )
    assert run.answer.text.strip()
    step = next(s for s in run.steps if s.stage == "llm_score")
    assert step.usage.llm_calls >= 1, run.degraded_reason  # one call grades both candidates
    score = Trace.objects.get(pk=run.trace_id).steps.get(stage="llm_score")
    assert score.summary["candidates"] == 2 and score.tokens_in > 0
    # The model's output is in the trace: its grades, or its malformed reply next to the error.
    for entry in score.summary["scores"]:
        assert entry["by"] == "llm" or any(f["chunk_id"] == entry["chunk_id"] for f in score.summary["failed"])
    kept = {chunk_id for chunk_id, _ in score.summary["kept"]}
    for citation in run.answer.citations:  # citations resolve to real passages of kept chunks
        assert citation.passage.anchor.pk in kept and citation.passage.text in citation.passage.anchor.text


def test_superrag_retrieval_ranks_by_the_llm_grades_for_evaluation_runs(corpus):
    from retrieval.pipeline import pipeline_retrieve
    from retrieval.request import AnswerRequest

    def grade(messages):
        if "expense reports" in messages[-1]["content"].lower():
            return {"confidence": 10, "relevant_text": ""}
        return {"confidence": 1, "relevant_text": ""}

    llm = ScriptedLLM(structured_reply=grade)
    plain = pipeline_retrieve(AnswerRequest(question="pasta", pipeline="simple", k=3), tenant=corpus)
    graded = pipeline_retrieve(
        AnswerRequest(question="pasta", pipeline="superrag", k=3), tenant=corpus, llm=llm, overrides=ONE_BY_ONE
    )
    assert plain.results[0].chunk.version.document.external_id == "recipes/pasta"
    assert graded.results[0].chunk.version.document.external_id == "finance/expenses"
    assert graded.results[0].score == 1.0 and [r.rank for r in graded.results] == [1, 2, 3]
    assert "llm_score" in [step.stage for step in graded.steps]


# --- Batched grading: several candidates per call, within a time budget ----------------------


def batch_grades(by_title: dict[str, int]):
    """A ``structured_reply`` for batched gradings: each passage's grade by its title's first word."""

    def reply(messages):
        titles = re.findall(r'<passage n="\d+" title="([^"]*)"', messages[-1]["content"])
        return {"grades": [next((g for w, g in by_title.items() if t.startswith(w)), 1) for t in titles]}

    return reply


def test_one_call_grades_a_batch_of_candidates_and_the_kept_passage_is_the_whole_chunk(corpus):
    llm = ScriptedLLM(
        structured_reply=batch_grades({"Fixing": 9}),
        answer_reply={"short_answer": "Patch it", "answer": "Patch the hole [1]."},
    )
    run = pipeline_answer(
        AnswerRequest(question=QUESTION, pipeline="superrag"),
        tenant=corpus,
        llm=llm,
        overrides={"superrag_batch": 10},
        trace=False,
    )
    gradings = [
        messages for method, messages in llm.calls if method == "structured" and "grades" in messages[0]["content"]
    ]
    assert len(gradings) == 1 and gradings[0][-1]["content"].count("<passage ") == 3
    score = next(step for step in run.steps if step.stage == "llm_score")
    assert score.summary["batch"] == 10 and score.summary["scored_by_llm"] == 3 and score.usage.llm_calls == 1
    kept = run.answer.citations[0].passage
    assert kept.document.external_id == "howto/bike-tyre" and kept.text.strip() == kept.anchor.text.strip()
    pack = next(step for step in run.steps if step.stage == "pack")
    assert pack.summary["passages"][0]["text"] == "whole chunk"


def test_batches_past_the_grading_budget_keep_the_fused_score_without_failing_the_run(corpus):
    results = candidates(corpus)
    llm = ScriptedLLM(structured_reply=batch_grades({"Fixing": 9}))
    scored = candidates_score(QUESTION, results, llm=llm, batch=2, budget_s=0.0)
    assert llm.calls == [] and all(c.scored_by == "fused" and c.unscored and not c.error for c in scored)
    scored = candidates_score(QUESTION, results, llm=llm, batch=2, budget_s=None)
    assert len(llm.calls) == 2 and [c.scored_by for c in scored] == ["llm", "llm", "llm"]


def test_a_candidate_the_budget_left_ungraded_never_outranks_a_graded_one():
    graded = [
        ScoredCandidate(result=SearchResult(chunk=None, score=1.0, rank=rank), confidence=grade, scored_by="llm")
        for rank, grade in ((1, 0.2), (2, 0.6))
    ]
    # RRF: the 30th candidate scores 61/90 = 0.68 of the best, above the graded 0.6
    ungraded = [
        ScoredCandidate(result=SearchResult(chunk=None, score=1.0, rank=30), confidence=0.68, unscored="budget")
    ]
    kept = candidates_keep(ungraded + graded, keep=1, threshold=0.5)
    assert [c.result.rank for c in kept] == [2]
    filled = candidates_keep(ungraded + graded, keep=3, threshold=0.5)
    assert [c.result.rank for c in filled] == [2, 30]  # the graded first, then the rest fill


def test_a_failed_batch_counts_its_usage_once_and_spares_the_endpoint_the_rest(corpus):
    results = candidates(corpus)
    llm = ScriptedLLM(structured_reply=LLMTimeout("The LLM endpoint timed out."))
    scored = candidates_score(QUESTION, results, llm=llm, batch=2)
    assert len(llm.calls) == 1  # the second batch is not sent after the endpoint failed
    assert [c.exception is not None for c in scored] == [True, False, False]
    assert all(c.scored_by == "fused" and c.error for c in scored)
