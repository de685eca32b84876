"""Score stage: answer-quality scores of a finished answer (seed ``rag-quality-design.txt``).

``support.answer_support`` (LLM-free: citation coverage, embedding support) and
``judge.answer_judge`` (the LLM's 1-5 grades against the question and against the cited
passages) can each be called alone; ``answer_scores`` combines them and never raises for an
endpoint failure; ``Score`` runs it as the traced ``score`` step of a pipeline run (when
``KB_SCORE_ANSWERS`` is on). The ``quality`` app uses ``answer_scores`` for evaluation runs.
"""

from __future__ import annotations

from typing import NamedTuple

from django.conf import settings

from core.errors import UpstreamError
from llm import LLMError, Usage
from retrieval.stages.base import Stage
from retrieval.stages.score.judge import answer_judge, answer_judge_with_usage
from retrieval.stages.score.support import answer_support
from retrieval.types import Answer

__all__ = ["SCORE_KEYS", "Scored", "answer_judge", "answer_scores", "answer_support", "Score"]

# Every scores dict has these keys (``None`` when a measure could not be taken), plus ``note``
# when something was skipped or failed.
SCORE_KEYS = (
    "coverage",
    "support_min",
    "support_mean",
    "sentences",
    "cited_sentences",
    "question_score",
    "question_reason",
    "context_score",
    "context_reason",
    "judge",
)


class Scored(NamedTuple):
    """``scores`` (keys ``SCORE_KEYS`` [+ ``note``]), the judge's LLM ``usage``, and ``error``:
    why the judge or the support measure failed (empty when nothing failed)."""

    scores: dict
    usage: Usage
    error: str


def answer_scores(
    answer: Answer, *, embedder, llm=None, no_llm_reason: str = "no LLM configured", max_tokens: int = 256
) -> Scored:
    """All scores of ``answer``: coverage and support always, the LLM judge's when ``llm`` is given.

    ``embedder``: as for ``answer_support``. ``llm``: an ``LLMClient`` or ``None`` (then the
    judge's keys are ``None`` and ``note`` says ``no_llm_reason``). ``scores["judge"]`` names
    the judging model; its reply may have ``max_tokens`` tokens. A failed judge call (any ``LLMError``, malformed output included) or a
    failed embedding call leaves its keys ``None`` and is told in ``note`` and ``error``;
    nothing is raised for them.
    """
    scores: dict = dict.fromkeys(SCORE_KEYS)
    notes: list[str] = []
    errors: list[str] = []
    usage = Usage()
    try:
        scores.update(answer_support(answer, embedder=embedder))
    except UpstreamError as exc:
        errors.append(f"support: {exc}")
    if llm is None:
        notes.append(f"LLM scores skipped: {no_llm_reason}")
    else:
        try:
            judged, usage = answer_judge_with_usage(answer, llm=llm, max_tokens=max_tokens)
        except LLMError as exc:
            usage = exc.usage or Usage()
            errors.append(f"LLM judge failed: {exc}")
        else:
            scores.update(judged, judge=getattr(llm, "model", None) or getattr(llm, "name", "llm"))
    notes = errors + notes
    if notes:
        scores["note"] = "; ".join(notes)
    return Scored(scores=scores, usage=usage, error="; ".join(errors))


class Score(Stage):
    """The ``score`` step of an answer (when ``KB_SCORE_ANSWERS`` is on): ``answer_scores`` of
    ``state.answer`` with the tenant's embedder and the run's LLM, into ``state.scores``.

    The judge runs only while the run still has an LLM (none configured, ``use_llm=False`` or
    an earlier failure: skipped, said in ``note``). A judge failure is recorded as the step's
    error, with the LLM usage it cost, but does not mark the answer degraded: the answer itself
    is unchanged.
    """

    name = "score"

    def active(self, state):
        return state.answering and settings.KB_SCORE_ANSWERS

    def apply(self, state, step):
        reason = "the LLM was unavailable earlier in this run" if state.degraded else "no LLM in this run"
        scored = answer_scores(state.answer, embedder=state.tenant.embedder, llm=state.llm, no_llm_reason=reason)
        step.usage = scored.usage
        step.error = scored.error
        step.summary = dict(scored.scores)
        state.scores = scored.scores
        return state
