"""Answer quality in evaluation runs: ``evaluate --answers`` and ``evaluation_answers``."""

import json
from io import StringIO

import pytest
from django.core.management import call_command

from core.errors import InvalidInput
from quality.models import EvaluationRun
from quality.services import evaluation_answers, judgment_list_import
from quality.services.answers import answer_means
from tests.retrieval.doubles import ScriptedLLM

ANSWER_METRICS = ("answer_question_score", "answer_context_score", "answer_coverage", "answer_support_mean")
JUDGED = [
    ("pasta", "How long do I boil spaghetti?", [{"document": "recipes/pasta"}]),
    ("bike", "How do I patch a punctured inner tube?", [{"document": "howto/bike-tyre"}]),
]


@pytest.fixture
def judgment_list(corpus):
    return judgment_list_import(tenant=corpus, name="handbook", origin="manual", judgments=JUDGED)


def test_evaluate_with_answers_adds_the_means_of_coverage_and_support_to_each_pipelines_run(beir_folder, db, settings):
    settings.KB_LLM_MODEL = ""  # no LLM: extractive answers, no LLM grades
    out, err = StringIO(), StringIO()

    call_command(
        "evaluate",
        "--dataset",
        "beir",
        "--path",
        str(beir_folder),
        "--pipeline",
        "simple,expand",
        "--answers",
        "--json",
        stdout=out,
        stderr=err,
    )

    runs = json.loads(out.getvalue())["runs"]
    assert set(runs) == {"simple", "expand"}
    for run in runs.values():
        metrics = run["metrics"]
        assert metrics["answers"] == 2 and metrics["answers_judged"] == 0
        assert metrics["answer_coverage"] == 1.0  # extractive answers cite every sentence
        assert 0.9 < metrics["answer_support_min"] <= metrics["answer_support_mean"] <= 1.0001
        assert metrics["answer_question_score"] is None and metrics["answer_context_score"] is None
        assert "no LLM configured" in metrics["answer_note"]
        assert metrics["ndcg@10"] > 0  # the retrieval metrics are still there
        assert EvaluationRun.objects.get(pk=run["run_id"]).metrics == metrics
    assert "Answering 2 questions through simple" in err.getvalue()


def test_evaluate_without_answers_adds_no_answer_metrics(beir_folder, db):
    out = StringIO()

    call_command(
        "evaluate",
        "--dataset",
        "beir",
        "--path",
        str(beir_folder),
        "--pipeline",
        "simple",
        "--json",
        stdout=out,
        stderr=StringIO(),
    )

    metrics = json.loads(out.getvalue())["runs"]["simple"]["metrics"]
    assert not {"answers", "answer_coverage", *ANSWER_METRICS} & set(metrics)


def test_with_an_llm_the_evaluation_averages_the_judges_grades(judgment_list):
    llm = ScriptedLLM(
        chat_reply="Boil it for nine to eleven minutes [1].",
        structured_replies=[
            {"question_reason": "Yes.", "question_score": 5, "context_reason": "Supported.", "context_score": 4},
            {"question_reason": "No.", "question_score": 2, "context_reason": "Partly.", "context_score": 3},
        ],
    )

    means = evaluation_answers(judgment_list=judgment_list, pipeline="simple", mode="hybrid", llm=llm)

    assert means["answer_question_score"] == 3.5 and means["answer_context_score"] == 3.5
    assert means["answers"] == 2 and means["answers_judged"] == 2
    assert means["answer_coverage"] == 1.0
    assert "answer_note" not in means
    assert [method for method, _ in llm.calls] == ["structured"] * 4


def test_judge_failures_are_counted_in_the_note_and_left_out_of_the_means():
    rows = [
        {"coverage": 1.0, "support_min": 0.8, "support_mean": 0.9, "question_score": 4, "context_score": 5},
        {"coverage": 0.5, "support_min": 0.4, "support_mean": 0.6, "question_score": None, "context_score": None},
    ]

    means = answer_means(rows, llm_configured=True)

    assert means["answer_question_score"] == 4.0 and means["answer_context_score"] == 5.0
    assert means["answer_coverage"] == 0.75 and means["answer_support_min"] == 0.6
    assert means["answer_note"] == "the LLM judge failed on 1 of 2 answers"


def test_evaluating_answers_in_an_unknown_mode_is_rejected(judgment_list):
    with pytest.raises(InvalidInput, match="Unknown mode"):
        evaluation_answers(judgment_list=judgment_list, mode="psychic", llm=None)
