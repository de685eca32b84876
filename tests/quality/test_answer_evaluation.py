"""Answer quality in evaluation runs: ``evaluate --answers`` and ``evaluation_answers``."""

import json
from io import StringIO

import pytest
from django.core.management import call_command

from core.errors import InvalidInput
from quality.models import EvaluationRun
from quality.services import evaluation_answers, judgment_list_import
from quality.services.answers import GOLD_KEYS, answer_gold_scores, answer_means
from retrieval.types import Answer
from tests.retrieval.doubles import ScriptedLLM

ANSWER_METRICS = ("answer_question_score", "answer_context_score", "answer_coverage", "answer_support_mean")
GOLD_METRICS = (
    "answer_exact_match",
    "answer_token_f1",
    "answer_gold_in_answer",
    "answer_yesno_accuracy",
    "answer_factoid_lenient",
    "answer_rouge_l",
)
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
    assert [method for method, _ in llm.calls] == ["chat", "structured"] * 2  # each answer, then its grades


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


# --- gold answers ------------------------------------------------------------------------------


def _evaluate_json(*args) -> dict:
    out = StringIO()
    call_command("evaluate", *args, "--json", stdout=out, stderr=StringIO())
    return json.loads(out.getvalue())


def test_evaluate_answers_on_a_hotpotqa_list_stores_the_gold_answer_metrics_of_the_extractive_answers(
    hotpotqa_file, db, settings
):
    settings.KB_LLM_MODEL = ""  # no LLM: the extractive answer is scored

    result = _evaluate_json("--dataset", "hotpotqa", "--path", str(hotpotqa_file), "--answers")

    metrics = result["metrics"]
    assert metrics["answers"] == 2 and metrics["answers_gold"] == 2
    # The extractive short answer is the name itself for the bridge question (an exact match); no
    # LLM-free rule says "yes" for the comparison, which keeps a sentence.
    assert metrics["answer_exact_match"] == 0.5
    assert metrics["answer_token_f1"] == 0.5
    assert metrics["answer_gold_in_answer"] == 0.5
    assert metrics["answer_cited"] == 1.0 and metrics["answer_relevant_cited"] == 1.0
    assert metrics["answer_seconds_mean"] > 0 and metrics["answer_seconds_p95"] >= metrics["answer_seconds_mean"]
    assert metrics["answer_llm_calls"] == 0 and metrics["answer_tokens_in"] == 0
    assert not {"answer_yesno_accuracy", "answer_factoid_lenient", "answer_rouge_l"} & set(metrics)
    run = EvaluationRun.objects.get(pk=result["run_id"])
    assert run.metrics == metrics
    bridge = next(q for q in run.per_query if q["query_id"] == "q1")
    assert "Scott Derrickson" in bridge["answer"]["short_answer"]
    assert bridge["answer"]["scores"]["gold_in_answer"] == 1.0 and bridge["answer"]["mode"] == "extractive"


def test_a_list_without_gold_answers_has_no_gold_answer_metrics_rather_than_zeros(judgment_list):
    means = evaluation_answers(judgment_list=judgment_list, pipeline="simple", mode="hybrid", llm=None)

    assert not set(GOLD_METRICS) & set(means)
    assert means["answers"] == 2 and means["answers_gold"] == 0
    assert means["answer_cited"] == 1.0  # citations need no gold answer


def test_with_an_llm_the_short_answer_is_scored_and_its_calls_and_tokens_are_counted(corpus):
    judgment_list = judgment_list_import(
        tenant=corpus,
        name="gold",
        origin="hotpotqa",
        judgments=[
            ("pasta", "How long do I boil spaghetti?", [{"document": "recipes/pasta"}], {"answer": "11 minutes"})
        ],
    )
    llm = ScriptedLLM(
        chat_reply="11 minutes [1]",
        structured_reply={"question_reason": "Yes.", "question_score": 5, "context_reason": "Yes.", "context_score": 5},
    )

    means = evaluation_answers(judgment_list=judgment_list, pipeline="simple", mode="hybrid", llm=llm)

    assert means["answer_exact_match"] == 1.0 and means["answer_token_f1"] == 1.0
    assert means["answer_gold_in_answer"] == 1.0 and means["answer_relevant_cited"] == 1.0
    assert means["answer_llm_calls"] == 1 and means["answer_tokens_in"] == 100 and means["answer_tokens_out"] == 10


def _answer(short_answer: str, *sentences: str, label: str = "") -> Answer:
    text = "\n".join([label, *(f"{sentence} [1]" for sentence in sentences)]).strip()
    return Answer(
        question="?",
        text=text,
        mode="llm",
        citations=[],
        short_answer=short_answer,
        sentences=[{"text": s, "citations": [1], "supported": True, "added": False} for s in sentences],
    )


def test_bioasq_yes_no_questions_are_scored_by_the_short_answers_yes_or_no_and_rouge_l():
    gold = {"type": "yesno", "exact_answer": "yes", "ideal_answer": ["Yes, concizumab is approved for hemophilia."]}

    right = answer_gold_scores(_answer("Yes", "Concizumab is approved for hemophilia."), gold=gold, relevant=[])
    wrong = answer_gold_scores(_answer("No", "Nothing about approval is said."), gold=gold, relevant=[])

    assert right["yes_no"] == 1.0 and wrong["yes_no"] == 0.0
    assert right["rouge_l"] > 0.7 > wrong["rouge_l"]
    assert "factoid_lenient" not in right and "exact_match" not in right


def test_the_extractive_label_saying_no_llm_is_not_read_as_a_no():
    label = "Extractive answer (no LLM configured); the most relevant passages say:"
    answer = _answer("", "Concizumab was studied in two trials.", label=label)

    scores = answer_gold_scores(answer, gold={"type": "yesno", "exact_answer": "no"}, relevant=[])

    assert scores["yes_no"] == 0.0  # it says neither yes nor no


def test_a_factoid_answer_counts_when_it_names_any_synonym_of_the_gold_entity():
    gold = {"type": "factoid", "exact_answer": [["hemophilia A", "haemophilia A"]]}

    hit = answer_gold_scores(_answer("", "It treats haemophilia A in adults."), gold=gold, relevant=[])
    miss = answer_gold_scores(_answer("", "It treats diabetes."), gold=gold, relevant=[])

    assert hit["factoid_lenient"] == 1.0 and miss["factoid_lenient"] == 0.0
    assert GOLD_KEYS & hit.keys() == {"factoid_lenient"}
