"""Answer quality in evaluation runs: answers to every judged question, scored, averaged.

Retrieval metrics say whether the right chunks were found; these say whether the answers made
from them are good (seed ``rag-quality-design.txt``: "Answer Completeness" and "Contextual
Accuracy", both graded 1-5 by an LLM, plus the LLM-free citation coverage and embedding
support of ``retrieval.stages.score``). Where a judgment has gold answers
(``Judgment.answers``), the answer is also scored against them (``quality.answer_metrics``):
exact match, token F1 and gold-in-answer for a reference text (HotpotQA); yes/no accuracy,
lenient factoid accuracy and ROUGE-L for BioASQ. Each judged question is answered through the
run's pipeline and mode, untraced; answers are slow I/O (embeddings, maybe LLM calls), so no
transaction is held meanwhile. Their LLM calls, the judge's included, count against the tenant's
daily LLM tokens (``llm.metering``): over its limit the answers are extractive and the LLM grades
are missing, with the reason.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import replace
from statistics import fmean

from core.errors import InvalidInput
from llm import configured_llm, llm_metered
from quality.answer_metrics import exact_match, factoid_lenient, gold_in_answer, rouge_l, token_f1, yes_no
from quality.metrics import percentile
from quality.models import EvaluationRun, Judgment, JudgmentList
from retrieval.config import MAX_QUERY_CHARS, MODES
from retrieval.pipeline import pipeline_answer, pipeline_spec
from retrieval.request import AnswerRequest
from retrieval.stages.score import answer_scores
from retrieval.types import Answer

# Run metric -> the per-answer score it averages.
ANSWER_METRICS = {
    "answer_question_score": "question_score",
    "answer_context_score": "context_score",
    "answer_coverage": "coverage",
    "answer_support_mean": "support_mean",
    "answer_support_min": "support_min",
}
# Run metric -> the per-answer score it averages over the answers that have it (see
# ``answer_gold_scores``); a run whose answers have none of a score has no such metric.
GOLD_METRICS = {
    "answer_cited": "cited",
    "answer_relevant_cited": "relevant_cited",
    "answer_exact_match": "exact_match",
    "answer_token_f1": "token_f1",
    "answer_gold_in_answer": "gold_in_answer",
    "answer_yesno_accuracy": "yes_no",
    "answer_factoid_lenient": "factoid_lenient",
    "answer_rouge_l": "rouge_l",
}
# Scores that need a gold answer (the others need only the judgment's relevant documents).
GOLD_KEYS = frozenset({"exact_match", "token_f1", "gold_in_answer", "yes_no", "factoid_lenient", "rouge_l"})
USAGE_METRICS = {"answer_llm_calls": "llm_calls", "answer_tokens_in": "tokens_in", "answer_tokens_out": "tokens_out"}
# The answer metrics a comparison and the chart page show, in this order, with their labels.
ANSWER_METRIC_LABELS = {
    "answer_exact_match": "Exact match of the short answer",
    "answer_token_f1": "Token F1 of the short answer",
    "answer_gold_in_answer": "Gold answer in the answer",
    "answer_yesno_accuracy": "Yes/no accuracy",
    "answer_factoid_lenient": "Factoid accuracy (lenient)",
    "answer_rouge_l": "ROUGE-L against the ideal answer",
    "answer_cited": "Answers with a citation",
    "answer_relevant_cited": "Answers citing a relevant document",
    "answer_coverage": "Citation coverage",
    "answer_support_mean": "Support (mean)",
    "answer_support_min": "Support (weakest sentence)",
    "answer_question_score": "LLM grade: answers the question (1-5)",
    "answer_context_score": "LLM grade: supported by the context (1-5)",
    "answer_seconds_mean": "Seconds per answer (mean)",
    "answer_seconds_p95": "Seconds per answer (p95)",
    "answer_llm_calls": "LLM calls",
    "answer_tokens_in": "Prompt tokens",
    "answer_tokens_out": "Completion tokens",
    "answers": "Answers",
    "answers_gold": "Answers with a gold answer",
}
CONFIGURED = object()
_MARKERS = re.compile(r"\s*\[\d+(?:\s*,\s*\d+)*\]")


def answer_prose(answer: Answer) -> str:
    """The answer's explanation as plain prose: its claim sentences without their ``[n]``
    markers, or its text without markers when it has no sentences (a label such as the
    extractive answer's "Extractive answer (no LLM configured)…" is not part of it)."""
    if answer.sentences:
        return " ".join(sentence["text"] for sentence in answer.sentences if sentence.get("text"))
    return _MARKERS.sub("", answer.text).strip()


def answer_gold_scores(answer: Answer, *, gold: dict, relevant: list[dict]) -> dict[str, float]:
    """Score one answer against a judgment's gold answers and relevant documents.

    ``gold`` is ``Judgment.answers`` (``{}``: no gold answer), ``relevant`` ``Judgment.relevant``.
    Returns floats in [0, 1]:

    - always ``"cited"`` (1.0 when the answer cites a passage) and ``"relevant_cited"`` (1.0 when
      a cited passage's document is a relevant one: for HotpotQA, a supporting-fact paragraph);
    - with ``gold["answer"]``: ``"exact_match"`` and ``"token_f1"`` of ``answer.short_answer``
      (an empty short answer scores 0.0), ``"gold_in_answer"`` of the short answer and the
      explanation together;
    - with a yes/no ``gold["exact_answer"]`` (``type`` "yesno"): ``"yes_no"``, the first yes or
      no word of the short answer (else of the explanation); saying neither scores 0.0;
    - with ``type`` "factoid" and an ``exact_answer``: ``"factoid_lenient"``, any synonym in the
      short answer or the explanation;
    - with ``gold["ideal_answer"]``: ``"rouge_l"`` of the explanation (``answer_prose``).
    """
    prose = answer_prose(answer)
    whole = f"{answer.short_answer} {prose}".strip()
    cited = {citation.passage.document.external_id for citation in answer.citations}
    relevant_documents = {entry["document"] for entry in relevant if entry.get("grade", 1) > 0}
    scores = {"cited": float(bool(answer.citations)), "relevant_cited": float(bool(cited & relevant_documents))}
    reference = gold.get("answer")
    if isinstance(reference, str) and reference.strip():
        scores["exact_match"] = exact_match(answer.short_answer, reference)
        scores["token_f1"] = token_f1(answer.short_answer, reference)
        scores["gold_in_answer"] = gold_in_answer(whole, reference)
    exact = gold.get("exact_answer")
    if gold.get("type") == "yesno" and isinstance(exact, str):
        scores["yes_no"] = yes_no(answer.short_answer or prose, exact) or 0.0
    if gold.get("type") == "factoid" and exact:
        scores["factoid_lenient"] = factoid_lenient(whole, exact)
    if gold.get("ideal_answer"):
        scores["rouge_l"] = rouge_l(prose, gold["ideal_answer"])
    return scores


def evaluation_answer_rows(
    *,
    judgment_list: JudgmentList,
    pipeline: str | None = None,
    mode: str | None = None,
    overrides: dict | None = None,
    k: int = 5,
    llm=CONFIGURED,
    log: Callable[[str], None] | None = None,
) -> list[dict]:
    """Answer every judged question of ``judgment_list``; one row per judgment, in judgment order.

    Arguments as in ``evaluation_answers``. A row is ``{"query_id", "short_answer", "found",
    "mode" ("llm" or "extractive"), "seconds" (the whole pipeline: retrieval and answer),
    "llm_calls", "tokens_in", "tokens_out" (the pipeline's LLM usage, the judge's not counted),
    "scores"}``; ``scores`` merges ``retrieval.stages.score.answer_scores`` and
    ``answer_gold_scores``. ``InvalidInput`` for an unknown pipeline or mode or an empty list.
    Every LLM call counts against the tenant's daily LLM tokens (recorded as ``evaluation``).
    """
    if mode is not None and mode not in MODES:
        raise InvalidInput(f"Unknown mode {mode!r}; use one of {', '.join(MODES)}.")
    tenant = judgment_list.tenant
    spec = pipeline_spec(tenant=tenant, name=pipeline, overrides=overrides)
    if mode is not None:
        spec = replace(spec, mode=mode)
    client = configured_llm() if llm is CONFIGURED else llm
    judgments = list(
        Judgment.objects.filter(judgment_list=judgment_list)
        .order_by("pk")
        .values_list("query_id", "question", "relevant", "answers")
    )
    if not judgments:
        raise InvalidInput(f"Judgment list {judgment_list.name!r} has no judgments.")
    rows: list[dict] = []
    for number, (query_id, question, relevant, gold) in enumerate(judgments, start=1):
        with llm_metered(tenant=tenant, purpose="evaluation"):
            run = pipeline_answer(
                AnswerRequest(question=question[:MAX_QUERY_CHARS], k=k, use_llm=client is not None),
                tenant=tenant,
                spec=spec,
                llm=client,
                trace=False,
            )
            # A run scored live (KB_SCORE_ANSWERS) already holds the same scores.
            scores = run.scores or answer_scores(run.answer, embedder=tenant.embedder, llm=client).scores
        usage = run.usage.as_dict()
        rows.append(
            {
                "query_id": query_id,
                "short_answer": run.answer.short_answer,
                "found": run.answer.found,
                "mode": run.answer.mode,
                "seconds": round(run.total_ms / 1000, 3),
                **{key: usage[key] for key in USAGE_METRICS.values()},
                "scores": {**scores, **answer_gold_scores(run.answer, gold=gold or {}, relevant=relevant)},
            }
        )
        if log and number % 25 == 0:
            log(f"{number}/{len(judgments)} answers")
    return rows


def evaluation_answers(
    *,
    judgment_list: JudgmentList,
    pipeline: str | None = None,
    mode: str | None = None,
    overrides: dict | None = None,
    k: int = 5,
    llm=CONFIGURED,
    log: Callable[[str], None] | None = None,
) -> dict:
    """Answer every judged question of ``judgment_list`` and average the answers' scores.

    ``pipeline`` (default: the tenant's), ``overrides`` (``Tenant.retrieval_config`` keys) and
    ``mode`` (default: the pipeline's) pick the configuration, as in ``evaluation_run``; ``k``
    passages (1-20) go into each answer. ``llm``: an ``LLMClient`` that writes and judges the
    answers, ``None`` for none (extractive answers, no LLM grades); default the configured one
    (``KB_LLM_MODEL``).

    Returns the means of ``answer_means`` (see there for the keys). ``InvalidInput`` for an
    unknown pipeline or mode or an empty judgment list.
    """
    client = configured_llm() if llm is CONFIGURED else llm
    rows = evaluation_answer_rows(
        judgment_list=judgment_list, pipeline=pipeline, mode=mode, overrides=overrides, k=k, llm=client, log=log
    )
    return answer_means(rows, llm_configured=client is not None)


def answer_means(rows: list[dict], *, llm_configured: bool) -> dict:
    """The run metrics of ``rows``: rows of ``evaluation_answer_rows``, or bare scores dicts.

    Always: ``"answer_question_score"``, ``"answer_context_score"`` (means of the 1-5 grades
    over the judged answers), ``"answer_coverage"``, ``"answer_support_mean"``,
    ``"answer_support_min"`` (each answer's weakest cited sentence), each ``None`` when no
    answer had the score, ``"answers"`` (questions answered), ``"answers_judged"`` and
    ``"answers_gold"`` (answers with a gold answer), plus ``"answer_note"`` saying why LLM
    grades are missing (no LLM configured, or how many judge calls failed) when they are.

    Only when some answer has the score (means in [0, 1] over those answers): the keys of
    ``GOLD_METRICS``: ``"answer_cited"``, ``"answer_relevant_cited"``, ``"answer_exact_match"``,
    ``"answer_token_f1"``, ``"answer_gold_in_answer"`` (HotpotQA-like gold answers),
    ``"answer_yesno_accuracy"``, ``"answer_factoid_lenient"``, ``"answer_rouge_l"`` (BioASQ):
    a list without gold answers has no gold metric at all, rather than a zero. Only when the
    rows have timings: ``"answer_seconds_mean"``, ``"answer_seconds_p95"`` (seconds per answer,
    retrieval included) and the LLM usage totals ``"answer_llm_calls"``, ``"answer_tokens_in"``,
    ``"answer_tokens_out"``. Means are rounded to 4 places, seconds to 3.
    """
    scores = [row.get("scores", row) for row in rows]
    means: dict = {}
    for metric, key in ANSWER_METRICS.items():
        values = [score[key] for score in scores if isinstance(score.get(key), (int, float))]
        means[metric] = round(fmean(values), 4) if values else None
    for metric, key in GOLD_METRICS.items():
        values = [score[key] for score in scores if isinstance(score.get(key), (int, float))]
        if values:
            means[metric] = round(fmean(values), 4)
    seconds = [row["seconds"] for row in rows if isinstance(row.get("seconds"), (int, float))]
    if seconds:
        means["answer_seconds_mean"] = round(fmean(seconds), 3)
        means["answer_seconds_p95"] = round(percentile(seconds, 95), 3)
        for metric, key in USAGE_METRICS.items():
            means[metric] = sum(row.get(key, 0) for row in rows)
    judged = sum(isinstance(score.get("question_score"), int) for score in scores)
    gold = sum(bool(GOLD_KEYS & score.keys()) for score in scores)
    means.update(answers=len(rows), answers_judged=judged, answers_gold=gold)
    if not llm_configured:
        means["answer_note"] = "no LLM configured: the LLM-judged answer scores are null"
    elif judged < len(rows):
        means["answer_note"] = f"the LLM judge failed on {len(rows) - judged} of {len(rows)} answers"
    return means


def evaluation_run_answers_add(
    *, run: EvaluationRun, judgment_list: JudgmentList, llm=CONFIGURED, log: Callable[[str], None] | None = None
) -> EvaluationRun:
    """Answer ``judgment_list`` through ``run``'s pipeline and mode and store the answers on ``run``.

    ``run.metrics`` gains ``answer_means``' keys; each ``run.per_query`` entry of an answered
    judgment gains ``"answer": {"short_answer", "found", "mode", "seconds", "scores"}`` (scores
    as in ``evaluation_answer_rows``, the gold ones included). Saved; returns ``run``.
    """
    if log:
        log(f"Answering {judgment_list.judgments.count()} questions through {run.pipeline} ({run.mode})")
    client = configured_llm() if llm is CONFIGURED else llm
    rows = evaluation_answer_rows(
        judgment_list=judgment_list, pipeline=run.pipeline, mode=run.mode, llm=client, log=log
    )
    run.metrics = {**run.metrics, **answer_means(rows, llm_configured=client is not None)}
    by_query = {row["query_id"]: row for row in rows}
    for entry in run.per_query:
        row = by_query.get(entry.get("query_id"))
        if row is not None:
            entry["answer"] = {key: row[key] for key in ("short_answer", "found", "mode", "seconds", "scores")}
    run.save(update_fields=["metrics", "per_query"])
    return run
