"""Answer quality in evaluation runs: answers to every judged question, scored, averaged.

Retrieval metrics say whether the right chunks were found; these say whether the answers made
from them are good (seed ``rag-quality-design.txt``: "Answer Completeness" and "Contextual
Accuracy", both graded 1-5 by an LLM, plus the LLM-free citation coverage and embedding
support of ``retrieval.stages.score``). Each judged question is answered through the run's
pipeline and mode, untraced; answers are slow I/O (embeddings, maybe LLM calls), so no
transaction is held meanwhile.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from statistics import fmean

from core.errors import InvalidInput
from llm import configured_llm
from quality.models import EvaluationRun, Judgment, JudgmentList
from retrieval.config import MAX_QUERY_CHARS, MODES
from retrieval.pipeline import pipeline_answer, pipeline_spec
from retrieval.stages.score import answer_scores

# Run metric -> the per-answer score it averages.
ANSWER_METRICS = {
    "answer_question_score": "question_score",
    "answer_context_score": "context_score",
    "answer_coverage": "coverage",
    "answer_support_mean": "support_mean",
    "answer_support_min": "support_min",
}
CONFIGURED = object()


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

    Returns ``{"answer_question_score", "answer_context_score"`` (means of the 1-5 grades over
    the judged answers), ``"answer_coverage", "answer_support_mean", "answer_support_min"``
    (means over the answers that have them; ``answer_support_min`` averages each answer's
    weakest cited sentence), ``"answers"`` (questions answered), ``"answers_judged"``}, each
    rounded to 4 places and ``None`` when no answer had the score, plus ``"answer_note"``
    saying why LLM grades are missing (no LLM configured, or how many judge calls failed) when
    they are. ``InvalidInput`` for an unknown pipeline or mode or an empty judgment list.
    """
    if mode is not None and mode not in MODES:
        raise InvalidInput(f"Unknown mode {mode!r}; use one of {', '.join(MODES)}.")
    tenant = judgment_list.tenant
    spec = pipeline_spec(tenant=tenant, name=pipeline, overrides=overrides)
    if mode is not None:
        spec = replace(spec, mode=mode)
    client = configured_llm() if llm is CONFIGURED else llm
    questions = list(
        Judgment.objects.filter(judgment_list=judgment_list).order_by("pk").values_list("question", flat=True)
    )
    if not questions:
        raise InvalidInput(f"Judgment list {judgment_list.name!r} has no judgments.")
    rows: list[dict] = []
    for number, question in enumerate(questions, start=1):
        run = pipeline_answer(
            tenant=tenant,
            question=question[:MAX_QUERY_CHARS],
            pipeline=spec,
            k=k,
            llm=client,
            use_llm=client is not None,
            trace=False,
        )
        # A run scored live (KB_SCORE_ANSWERS) already holds the same scores.
        rows.append(run.scores or answer_scores(run.answer, embedder=tenant.embedder, llm=client).scores)
        if log and number % 25 == 0:
            log(f"{number}/{len(questions)} answers")
    return answer_means(rows, llm_configured=client is not None)


def answer_means(rows: list[dict], *, llm_configured: bool) -> dict:
    """The run metrics of ``rows`` (scores dicts of ``retrieval.stages.score.answer_scores``).

    See ``evaluation_answers`` for the keys; a mean skips the answers without that score.
    """
    means: dict = {}
    for metric, key in ANSWER_METRICS.items():
        values = [row[key] for row in rows if isinstance(row.get(key), (int, float))]
        means[metric] = round(fmean(values), 4) if values else None
    judged = sum(isinstance(row.get("question_score"), int) for row in rows)
    means.update(answers=len(rows), answers_judged=judged)
    if not llm_configured:
        means["answer_note"] = "no LLM configured: the LLM-judged answer scores are null"
    elif judged < len(rows):
        means["answer_note"] = f"the LLM judge failed on {len(rows) - judged} of {len(rows)} answers"
    return means


def evaluation_run_answers_add(
    *, run: EvaluationRun, judgment_list: JudgmentList, llm=CONFIGURED, log: Callable[[str], None] | None = None
) -> EvaluationRun:
    """Add ``evaluation_answers``' means for ``run``'s pipeline and mode to ``run.metrics``; saved."""
    if log:
        log(f"Answering {judgment_list.judgments.count()} questions through {run.pipeline} ({run.mode})")
    run.metrics = {
        **run.metrics,
        **evaluation_answers(judgment_list=judgment_list, pipeline=run.pipeline, mode=run.mode, llm=llm, log=log),
    }
    run.save(update_fields=["metrics"])
    return run
