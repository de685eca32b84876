"""The adaptive flow (none of the anchor products has it): escalate only when retrieval is unsure.

Level 1 answers like ``simple``. When its retrieval confidence (``retrieval.stages.confidence``,
a logistic model of the top fused score and margin fitted on the dev sets) is below
``spec.adaptive_threshold``, level 2 runs SuperRAG (the LLM scores ~50 candidates); when
SuperRAG's best confidence is still below the threshold, level 3 runs WalkingRAG (multi-round
retrieval from extracted facts). A level is never started once the request's latency or cost
budget (``KB_BUDGET_MS``, ``KB_BUDGET_USD``) is spent, nor without an LLM (levels 2 and 3 need
one to add anything). The ``escalate`` steps and the response's ``escalation`` say which level
answered and why.
"""

from __future__ import annotations

import time

from django.conf import settings

from retrieval.flows.base import Flow
from retrieval.run import RunContext, generate_stage, pack_stage, retrieval_stages
from retrieval.stages.confidence import retrieval_confidence


def _budget_left(run: RunContext, started: float) -> str:
    """Why no further level may start ("" when one may)."""
    spent_ms = (time.perf_counter() - started) * 1000
    if spent_ms >= settings.KB_BUDGET_MS:
        return f"latency budget spent ({spent_ms:.0f} of {settings.KB_BUDGET_MS} ms)"
    if run.usage.cost_usd >= settings.KB_BUDGET_USD:
        return f"cost budget spent (${run.usage.cost_usd:.4f} of ${settings.KB_BUDGET_USD})"
    if run.llm is None:
        return "no LLM available"
    return ""


def adaptive_flow(
    run: RunContext, question: str, *, k: int, reverse_pack: bool, history: list[str] | None = None
) -> Flow:
    """Answer at the cheapest level whose confidence reaches the threshold (see module docstring)."""
    from retrieval.flows.superrag import superrag_flow
    from retrieval.flows.walkingrag import walkingrag_flow

    started = time.perf_counter()
    threshold = run.spec.adaptive_threshold
    plan, results = retrieval_stages(run, question, k=k, mode=run.spec.mode, history=history)
    confidence = retrieval_confidence(results)
    levels = [{"level": "simple", "confidence": round(confidence, 4)}]
    with run.step("escalate") as step:
        stop = "confident" if confidence >= threshold else _budget_left(run, started)
        step.summary = {"from": "simple", "confidence": round(confidence, 4), "threshold": threshold}
        step.summary["decision"] = f"answer at simple: {stop}" if stop else "escalate to superrag"
    if stop:
        search_ms = (time.perf_counter() - started) * 1000
        passages = pack_stage(run, results, k=k, reverse_pack=reverse_pack)
        answer = generate_stage(run, question, passages, reverse_pack=reverse_pack)
        escalation = {"level": "simple", "reason": stop, "levels": levels, "threshold": threshold}
        return Flow(plan, results, answer, search_ms, confidence=confidence, escalation=escalation)

    flow = superrag_flow(run, question, k=k, reverse_pack=reverse_pack, history=history)
    super_confidence = flow.confidence if flow.confidence is not None else 0.0
    levels.append({"level": "superrag", "confidence": round(super_confidence, 4)})
    with run.step("escalate") as step:
        stop = "confident" if super_confidence >= threshold else _budget_left(run, started)
        step.summary = {"from": "superrag", "confidence": round(super_confidence, 4), "threshold": threshold}
        step.summary["decision"] = f"answer at superrag: {stop}" if stop else "escalate to walkingrag"
    if stop:
        flow.escalation = {"level": "superrag", "reason": stop, "levels": levels, "threshold": threshold}
        return flow

    walked = walkingrag_flow(run, question, k=k, reverse_pack=reverse_pack, history=history)
    levels.append({"level": "walkingrag", "confidence": walked.confidence})
    walked.escalation = {
        "level": "walkingrag",
        "reason": "simple and superrag were below the threshold",
        "levels": levels,
        "threshold": threshold,
    }
    return walked
