"""Adaptive, a composite stage (none of the anchor products has it): escalate only when retrieval is unsure.

Level 1 answers like ``simple``. When its retrieval confidence (``retrieval.stages.confidence``,
a logistic model of the top fused score and margin fitted on the dev sets) is below
``adaptive_threshold``, level 2 runs SuperRAG (the LLM scores ~50 candidates); when
SuperRAG's best confidence is still below the threshold, level 3 runs WalkingRAG (multi-round
retrieval from extracted facts). A level is never started once the request's latency or cost
budget (``KB_BUDGET_MS``, ``KB_BUDGET_USD``) is spent, nor without an LLM (levels 2 and 3 need
one to add anything). The ``escalate`` steps and the response's ``escalation`` say which level
answered and why.
"""

from __future__ import annotations

from dataclasses import dataclass

from django.conf import settings

from core.schema import setting
from retrieval.stages.base import Stage, ranking_run, stages_run
from retrieval.stages.confidence import DEFAULT_THRESHOLD, retrieval_confidence


@dataclass(frozen=True)
class AdaptiveConfig:
    """Settings of the adaptive stage."""

    adaptive_threshold: float = setting(
        DEFAULT_THRESHOLD, range=(0.0, 1.0), doc="adaptive: escalate below this retrieval confidence"
    )


def _budget_left(state) -> str:
    """Why no further level may start ("" when one may)."""
    spent_ms = state.elapsed_ms()
    if spent_ms >= settings.KB_BUDGET_MS:
        return f"latency budget spent ({spent_ms:.0f} of {settings.KB_BUDGET_MS} ms)"
    if state.usage.cost_usd >= settings.KB_BUDGET_USD:
        return f"cost budget spent (${state.usage.cost_usd:.4f} of ${settings.KB_BUDGET_USD})"
    if state.llm is None:
        return "no LLM available"
    return ""


class Adaptive(Stage):
    """The adaptive composite stage: answer at the cheapest level whose confidence reaches the
    threshold (module docstring). Levels: the ``ranking`` stages then ``answer`` stages (pack,
    generate), then ``superrag``, then ``walkingrag`` (composite stages). Ranking only: the
    ``ranking`` stages."""

    name = "adaptive"
    config = AdaptiveConfig

    def __init__(self, *, ranking: tuple, answer: tuple, superrag, walkingrag):
        self.ranking, self.answer = ranking, answer
        self.superrag, self.walkingrag = superrag, walkingrag

    def _escalate(self, state, level: str, confidence: float, threshold: float, following: str) -> str:
        with state.step("escalate") as step:
            stop = "confident" if confidence >= threshold else _budget_left(state)
            step.summary = {"from": level, "confidence": round(confidence, 4), "threshold": threshold}
            step.summary["decision"] = f"answer at {level}: {stop}" if stop else f"escalate to {following}"
        return stop

    def run(self, state):
        state = ranking_run(state, self.ranking, depth=state.request.k)
        if not state.answering:
            return state
        threshold = state.spec.of(AdaptiveConfig).adaptive_threshold
        confidence = retrieval_confidence(state.results)
        levels = [{"level": "simple", "confidence": round(confidence, 4)}]
        stop = self._escalate(state, "simple", confidence, threshold, "superrag")
        if stop:
            state = stages_run(state, self.answer)
            state.confidence = confidence
            state.escalation = {"level": "simple", "reason": stop, "levels": levels, "threshold": threshold}
            return state

        state = self.superrag.run(state)
        super_confidence = state.confidence if state.confidence is not None else 0.0
        levels.append({"level": "superrag", "confidence": round(super_confidence, 4)})
        stop = self._escalate(state, "superrag", super_confidence, threshold, "walkingrag")
        if stop:
            state.escalation = {"level": "superrag", "reason": stop, "levels": levels, "threshold": threshold}
            return state

        state = self.walkingrag.run(state)
        levels.append({"level": "walkingrag", "confidence": state.confidence})
        state.escalation = {
            "level": "walkingrag",
            "reason": "simple and superrag were below the threshold",
            "levels": levels,
            "threshold": threshold,
        }
        return state
