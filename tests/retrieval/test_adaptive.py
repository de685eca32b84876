"""The adaptive pipeline: answer at simple when retrieval is confident, escalate when it is not."""

import pytest

from retrieval.pipeline import pipeline_answer
from retrieval.request import AnswerRequest
from retrieval.stages.confidence import retrieval_confidence
from retrieval.types import SearchResult
from tests.retrieval.doubles import ScriptedLLM


def results_scored(*scores):
    return [SearchResult(chunk=None, score=s, rank=i) for i, s in enumerate(scores, 1)]


def test_retrieval_confidence_grows_with_the_top_score_and_its_margin():
    assert retrieval_confidence([]) == 0.0
    sure = retrieval_confidence(results_scored(1.0, 0.3))
    close = retrieval_confidence(results_scored(1.0, 0.95))
    weak = retrieval_confidence(results_scored(0.6, 0.55))
    assert sure > close > weak and 0.0 < weak < 0.5 < sure < 1.0


def stages(run):
    return [step.stage for step in run.steps]


def test_a_confident_retrieval_answers_at_the_simple_level(corpus):
    llm = ScriptedLLM(chat_reply="Boil it for nine to eleven minutes [1].")
    run = pipeline_answer(
        AnswerRequest(question="How long do I cook spaghetti?", pipeline="adaptive"),
        tenant=corpus,
        llm=llm,
        trace=False,
        overrides={"adaptive_threshold": 0.0},
    )
    assert run.escalation["level"] == "simple" and run.escalation["reason"] == "confident"
    assert stages(run) == ["scope", "retrieve", "fuse", "escalate", "pack", "generate"]
    assert run.as_dict()["escalation"]["levels"][0]["level"] == "simple"
    assert [method for method, _ in llm.calls] == ["chat"]  # the answer only


def test_an_unsure_retrieval_escalates_to_superrag_and_stops_there_when_it_is_confident(corpus):
    def grade(messages):
        text = messages[-1]["content"]
        if "nine to eleven minutes" in text:
            return {"confidence": 10, "relevant_text": "Cook for nine to eleven minutes until al dente."}
        return {"confidence": 0, "relevant_text": ""}

    llm = ScriptedLLM(structured_reply=grade, chat_reply="Nine to eleven minutes [1].")
    run = pipeline_answer(
        AnswerRequest(question="How long do I cook spaghetti?", pipeline="adaptive"),
        tenant=corpus,
        llm=llm,
        overrides={"adaptive_threshold": 1.0 - 1e-9, "superrag_candidates": 3, "superrag_batch": 1},
    )
    assert run.escalation["level"] == "superrag"
    assert [level["level"] for level in run.escalation["levels"]] == ["simple", "superrag"]
    assert "llm_score" in stages(run) and stages(run).count("escalate") == 2
    assert run.answer.citations[0].as_dict()["document"] == "recipes/pasta"


def test_without_an_llm_the_adaptive_pipeline_answers_at_simple_and_says_why(corpus):
    run = pipeline_answer(
        AnswerRequest(question="How long do I cook spaghetti?", pipeline="adaptive", use_llm=False),
        tenant=corpus,
        overrides={"adaptive_threshold": 1.0},
    )
    assert run.escalation == {
        "level": "simple",
        "reason": "no LLM available",
        "levels": run.escalation["levels"],
        "threshold": 1.0,
    }
    assert run.answer.mode == "extractive" and run.answer.citations


def test_a_spent_budget_stops_escalation(corpus, settings):
    settings.KB_BUDGET_MS = 0
    run = pipeline_answer(
        AnswerRequest(question="How long do I cook spaghetti?", pipeline="adaptive"),
        tenant=corpus,
        llm=ScriptedLLM(chat_reply="x [1]"),
        overrides={"adaptive_threshold": 1.0},
        trace=False,
    )
    assert run.escalation["level"] == "simple" and run.escalation["reason"].startswith("latency budget spent")


@pytest.mark.parametrize("threshold", [1.0])
def test_the_adaptive_pipeline_runs_with_the_real_local_llm(corpus, local_llm_url, threshold):
    from llm import LLMClient
    from llm.local import MODEL_ALIAS

    llm = LLMClient(MODEL_ALIAS, base_url=local_llm_url, api_key="local", timeout_s=600)
    run = pipeline_answer(
        AnswerRequest(question="How do I fix a flat bicycle tyre?", pipeline="adaptive", k=2),
        tenant=corpus,
        llm=llm,
        overrides={"adaptive_threshold": threshold, "superrag_candidates": 2, "walk_max_rounds": 1},
    )
    assert run.escalation["level"] in ("superrag", "walkingrag")  # plumbing: it escalated and answered
    assert "escalate" in stages(run) and run.trace_id and run.answer.text.strip()
