"""Answer-quality scores: citation coverage, embedding support, the LLM judge, and live scoring."""

from types import SimpleNamespace

import pytest
from django.contrib.auth.models import Permission
from django.template.loader import render_to_string
from django.urls import reverse

from llm import LLMBadOutput, LLMClient, LLMTimeout
from retrieval.admin import TraceAdmin
from retrieval.models import Trace
from retrieval.pipeline import pipeline_answer
from retrieval.request import AnswerRequest
from retrieval.stages.generate.cited import NOT_FOUND
from retrieval.stages.generate.extractive import LABEL
from retrieval.stages.score import SCORE_KEYS, answer_judge, answer_scores, answer_support
from retrieval.stages.score.support import answer_sentences
from retrieval.traces import trace_save
from retrieval.types import Answer, Citation, Passage
from tests.api.conftest import client_for
from tests.retrieval.doubles import ScriptedLLM

PASTA = (
    "Bring a large pot of salted water to a rolling boil. Add the spaghetti and stir so it does not stick. "
    "Cook for nine to eleven minutes until al dente."
)
TYRE = "Remove the wheel and lever the tyre off the rim. Patch the hole in the inner tube with glue and a rubber patch."
QUESTION = "How long do I cook spaghetti?"
GOOD_JUDGEMENT = {
    "question_reason": "It gives the cooking time.",
    "question_score": 5,
    "context_reason": "Passage 1 states nine to eleven minutes.",
    "context_score": 4,
}


def _passage(text: str, title: str = "Cooking pasta") -> Passage:
    document = SimpleNamespace(title=title)
    anchor = SimpleNamespace(heading="", version=SimpleNamespace(document=document))
    return Passage(anchor=anchor, text=text, score=1.0)


def _answer(text: str, *passages: Passage, found: bool = True) -> Answer:
    citations = [Citation(n=n, passage=p) for n, p in enumerate(passages, start=1)]
    return Answer(question=QUESTION, text=text, mode="llm", citations=citations, found=found)


# --- coverage and support (no LLM) ------------------------------------------------------------


def test_coverage_is_the_share_of_answer_sentences_that_cite_a_passage():
    answer = _answer(
        "Cook the spaghetti for nine to eleven minutes [1]. Enjoy your meal. Stir it so it does not stick [1].",
        _passage(PASTA),
    )

    scores = answer_support(answer, embedder="local")

    assert scores["sentences"] == 3
    assert scores["cited_sentences"] == 2
    assert scores["coverage"] == pytest.approx(2 / 3, abs=1e-4)


def test_a_sentence_quoted_from_its_cited_passage_is_fully_supported():
    answer = _answer("Cook for nine to eleven minutes until al dente. [1]", _passage(PASTA))

    scores = answer_support(answer, embedder="local")

    assert scores["coverage"] == 1.0
    assert scores["support_min"] == pytest.approx(1.0, abs=1e-3)


def test_a_claim_its_cited_passage_does_not_make_lowers_the_minimum_support():
    answer = _answer(
        "Cook for nine to eleven minutes until al dente [1]. Patch the inner tube with glue and a rubber patch [1].",
        _passage(PASTA),
    )

    scores = answer_support(answer, embedder="local")

    assert scores["support_min"] < 0.5 < scores["support_mean"] < 0.99
    faithful = answer_support(
        _answer("Patch the inner tube with glue and a rubber patch [2].", _passage(PASTA), _passage(TYRE)),
        embedder="local",
    )
    assert faithful["support_min"] > 0.85  # the same claim, citing the passage that makes it


def test_a_sentence_is_supported_by_the_best_of_the_passages_it_cites():
    answer = _answer(
        "Patch the hole in the inner tube with glue and a rubber patch [1][2].", _passage(PASTA), _passage(TYRE)
    )

    assert answer_support(answer, embedder="local")["support_min"] > 0.95


def test_citation_markers_after_the_full_stop_belong_to_the_sentence_before():
    sentences = answer_sentences("Boil the water first. [1] Then add the spaghetti. [2][3]")

    assert [numbers for _, numbers in sentences] == [[1], [2, 3]]
    assert [text for text, _ in sentences] == ["Boil the water first.", "Then add the spaghetti."]


def test_the_extractive_label_bullets_and_introductory_lines_are_not_sentences():
    text = f"{LABEL}\n- Cook for nine to eleven minutes until al dente. [1]\nIn short:\n* Drain the pasta well. [1]"

    assert answer_sentences(text) == [
        ("Cook for nine to eleven minutes until al dente.", [1]),
        ("Drain the pasta well.", [1]),
    ]


def test_a_number_the_answer_does_not_cite_supports_nothing():
    answer = _answer("Cook it for nine to eleven minutes [3].", _passage(PASTA))

    scores = answer_support(answer, embedder="local")

    assert scores["coverage"] == 0.0
    assert scores["support_min"] is None and scores["support_mean"] is None


def test_an_answer_that_finds_nothing_has_no_sentences_to_score():
    scores = answer_support(_answer(NOT_FOUND, found=False), embedder="local")

    assert scores["coverage"] is None and scores["sentences"] == 0


# --- the LLM judge ----------------------------------------------------------------------------


def test_the_judge_returns_both_grades_with_their_reasons_from_one_structured_call():
    llm = ScriptedLLM(structured_reply=GOOD_JUDGEMENT)
    answer = _answer("Cook it for nine to eleven minutes [1].", _passage(PASTA))

    judgement = answer_judge(answer, None, llm=llm)

    assert judgement == {
        "question_score": 5,
        "question_reason": "It gives the cooking time.",
        "context_score": 4,
        "context_reason": "Passage 1 states nine to eleven minutes.",
    }
    [(method, messages)] = llm.calls
    prompt = messages[-1]["content"]
    assert method == "structured"
    assert '<passage n="1" title="Cooking pasta">' in prompt and "nine to eleven minutes until al dente" in prompt
    assert QUESTION in prompt and "<answer>\nCook it for nine to eleven minutes [1].\n</answer>" in prompt


def test_the_judge_sees_the_passages_under_the_numbers_the_answer_cites():
    answer = Answer(
        question=QUESTION,
        text="Patch it [2].",
        mode="llm",
        citations=[Citation(n=2, passage=_passage(TYRE, "Tyres"))],
    )
    llm = ScriptedLLM(structured_reply=GOOD_JUDGEMENT)

    answer_judge(answer, None, llm=llm)

    assert '<passage n="2" title="Tyres">' in llm.calls[0][1][-1]["content"]


@pytest.mark.parametrize(
    "reply",
    [
        {**GOOD_JUDGEMENT, "question_score": "great"},
        {**GOOD_JUDGEMENT, "context_score": 9},
        {**GOOD_JUDGEMENT, "context_reason": ["not", "text"]},
        {"question_score": 3},
        ["not", "an", "object"],
    ],
)
def test_a_malformed_judgement_is_bad_output_and_scoring_goes_on_without_it(reply):
    answer = _answer("Cook for nine to eleven minutes until al dente [1].", _passage(PASTA))
    llm = ScriptedLLM(structured_reply=reply)

    with pytest.raises(LLMBadOutput):
        answer_judge(answer, None, llm=llm)
    scored = answer_scores(answer, embedder="local", llm=llm)

    assert set(SCORE_KEYS) <= set(scored.scores)
    assert scored.scores["coverage"] == 1.0 and scored.scores["question_score"] is None
    assert "LLM judge failed" in scored.scores["note"] and scored.error


def test_a_judge_that_times_out_leaves_the_llm_free_scores_and_says_why():
    answer = _answer("Cook for nine to eleven minutes until al dente [1].", _passage(PASTA))

    scored = answer_scores(answer, embedder="local", llm=ScriptedLLM(structured_reply=LLMTimeout("judge timed out")))

    assert scored.scores["support_min"] > 0.9
    assert scored.scores["context_score"] is None
    assert "judge timed out" in scored.scores["note"]


# --- live scoring on every answer -------------------------------------------------------------


def test_with_scoring_on_an_extractive_answer_stores_coverage_and_support_on_its_trace(corpus, settings):
    settings.KB_SCORE_ANSWERS = True

    run = pipeline_answer(AnswerRequest(question=QUESTION, use_llm=False), tenant=corpus)

    assert run.scores["coverage"] == 1.0  # every extractive sentence is cited
    assert run.scores["support_min"] > 0.95  # and quoted from its passage
    assert run.scores["question_score"] is None and "LLM scores skipped" in run.scores["note"]
    trace = Trace.objects.get(pk=run.trace_id)
    assert trace.scores == run.scores
    assert [step.stage for step in trace.steps.all()][-1] == "score"


def test_with_scoring_on_an_llm_answer_is_also_judged_and_the_judge_counts_in_the_usage(corpus, settings):
    settings.KB_SCORE_ANSWERS = True
    llm = ScriptedLLM(chat_reply="Cook it for nine to eleven minutes [1].", structured_reply=GOOD_JUDGEMENT)

    run = pipeline_answer(AnswerRequest(question=QUESTION), tenant=corpus, llm=llm)

    assert run.answer.mode == "llm"
    assert run.scores["question_score"] == 5 and run.scores["context_score"] == 4
    assert run.scores["judge"] == "scripted" and run.scores["coverage"] == 1.0
    assert run.usage.llm_calls == 2
    assert Trace.objects.get(pk=run.trace_id).llm_calls == 2


def test_a_failing_judge_neither_fails_nor_degrades_the_answer(corpus, settings):
    settings.KB_SCORE_ANSWERS = True
    llm = ScriptedLLM(chat_reply="Cook it for nine to eleven minutes [1].", structured_reply={"question_score": "?"})

    run = pipeline_answer(AnswerRequest(question=QUESTION), tenant=corpus, llm=llm)

    assert run.answer.mode == "llm" and not run.degraded
    assert run.scores["coverage"] == 1.0 and run.scores["question_score"] is None
    assert "LLM judge failed" in run.scores["note"]
    score_step = Trace.objects.get(pk=run.trace_id).steps.get(stage="score")
    assert "LLM judge failed" in score_step.error


def test_with_scoring_off_answers_have_no_scores(corpus, settings):
    settings.KB_SCORE_ANSWERS = False

    run = pipeline_answer(AnswerRequest(question=QUESTION, use_llm=False), tenant=corpus)

    assert run.scores is None and run.as_dict()["scores"] is None
    assert Trace.objects.get(pk=run.trace_id).scores == {}
    assert "score" not in [step.stage for step in run.steps]


@pytest.mark.parametrize("scoring", [True, False])
def test_the_ask_api_returns_the_scores_when_scoring_is_on_and_null_when_off(corpus, member, settings, scoring):
    settings.KB_SCORE_ANSWERS = scoring

    response = client_for(member).post("/api/v1/ask/", {"question": QUESTION, "extractive": True}, format="json")

    assert response.status_code == 200, response.content
    scores = response.json()["scores"]
    if scoring:
        assert scores["coverage"] == 1.0 and scores["support_mean"] > 0.95
    else:
        assert scores is None


# --- where people see them --------------------------------------------------------------------


def test_the_portal_badge_shows_coverage_support_and_the_llm_grades():
    scores = {"coverage": 0.6667, "support_min": 0.41, "support_mean": 0.72, "question_score": 5, "context_score": 2}

    html = render_to_string("portal/_answer_scores.html", {"answer": {"scores": scores}})

    assert "cited 67% of sentences" in html
    assert "support 0.72 (min 0.41)" in html
    assert "answers the question 5/5" in html and "supported by its sources 2/5" in html


def test_the_portal_badge_leaves_out_what_was_not_scored_and_is_absent_without_scores():
    scores = {"coverage": 0.0, "support_min": None, "support_mean": None, "question_score": None}

    html = render_to_string("portal/_answer_scores.html", {"answer": {"scores": scores}})

    assert "cited 0% of sentences" in html and "support" not in html and "/5" not in html
    assert render_to_string("portal/_answer_scores.html", {"answer": {"scores": None}}).strip() == ""


def test_the_trace_admin_lists_coverage_and_shows_the_scores(client, admin_member, corpus, settings):
    settings.KB_SCORE_ANSWERS = True
    run = pipeline_answer(AnswerRequest(question=QUESTION, use_llm=False), tenant=corpus)
    admin_member.user_permissions.add(Permission.objects.get(codename="view_trace"))
    client.force_login(admin_member)

    by_coverage = str(TraceAdmin.list_display.index("coverage") + 1)
    listing = client.get(reverse("admin:retrieval_trace_changelist"), {"o": by_coverage})
    page = client.get(reverse("admin:retrieval_trace_change", args=[run.trace_id]))

    assert listing.status_code == 200 and "100%" in listing.content.decode()
    assert page.status_code == 200 and "support_mean" in page.content.decode()


# --- the real local LLM: plumbing only --------------------------------------------------------


def test_the_real_local_llm_judges_an_answer_and_the_trace_keeps_its_grades(corpus, local_llm_url):
    from llm.local import MODEL_ALIAS

    llm = LLMClient(MODEL_ALIAS, base_url=local_llm_url, api_key="local", timeout_s=600, retries=0)
    run = pipeline_answer(
        AnswerRequest(question=QUESTION, use_llm=False, k=1, strategy="top_n"), tenant=corpus, trace=False
    )

    scored = answer_scores(run.answer, embedder=corpus.embedder, llm=llm, max_tokens=64)
    trace = trace_save(
        tenant=corpus,
        user=None,
        pipeline=run.pipeline,
        question=QUESTION,
        answer=run.answer.text,
        steps=run.steps,
        usage=scored.usage,
        degraded=False,
        total_ms=run.total_ms,
        scores=scored.scores,
    )

    assert scored.usage.llm_calls >= 1 and scored.usage.tokens_out > 0  # the model replied
    stored = Trace.objects.get(pk=trace.pk).scores
    assert stored["coverage"] == 1.0
    if isinstance(stored["question_score"], int):
        assert 1 <= stored["context_score"] <= 5 and stored["judge"] == MODEL_ALIAS
    else:  # a tiny model may not fit the schema in 64 tokens: said so, nothing raised
        assert "LLM judge failed" in stored["note"]
