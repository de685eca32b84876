"""The records of a pipeline run: ``RetrievalRun`` (the ranked chunks and how they were found)
and ``AnswerRun`` (a cited answer with its retrieval, steps, LLM usage, degradation and trace),
made from the run's ``RunState`` when ``retrieval.pipeline`` finishes it."""

from __future__ import annotations

from dataclasses import dataclass, field

from llm import Usage
from retrieval.schema import PipelineSpec
from retrieval.state import RunState
from retrieval.types import Answer, QueryPlan, SearchResult, Step


@dataclass
class RetrievalRun:
    """The ranked chunks of a pipeline run and how they were found.

    ``results`` best first; ``steps`` one per stage; ``usage`` the LLM usage of the whole run;
    ``degraded`` true when an LLM stage failed (``degraded_reason`` says which and why);
    ``total_ms`` the wall time of all stages; ``timings_ms`` per retriever and stage.
    """

    pipeline: str
    spec: PipelineSpec
    plan: QueryPlan
    results: list[SearchResult]
    steps: list[Step]
    usage: Usage
    degraded: bool
    degraded_reason: str
    total_ms: float
    timings_ms: dict[str, float]

    @classmethod
    def of(cls, run: RunState, *, total_ms: float) -> RetrievalRun:
        """The record of ``run``'s retrieval: its plan and results, spec, steps, usage and degradation so far."""
        return cls(
            pipeline=run.spec.name,
            spec=run.spec,
            plan=run.plan,
            results=run.results,
            steps=run.steps,
            usage=run.usage,
            degraded=run.degraded,
            degraded_reason="; ".join(run.reasons),
            total_ms=total_ms,
            timings_ms={name: round(ms, 2) for name, ms in {**run.timings, "total_ms": total_ms}.items()},
        )


@dataclass
class AnswerRun:
    """A cited answer with its pipeline, steps, LLM usage, degradation and trace id."""

    answer: Answer
    retrieval: RetrievalRun
    steps: list[Step]
    usage: Usage
    degraded: bool
    degraded_reason: str
    total_ms: float
    trace_id: int | None = None
    # Answer-quality scores (``retrieval.stages.score.Score``) when ``KB_SCORE_ANSWERS`` is on, else None.
    scores: dict | None = None
    escalation: dict = field(default_factory=dict)
    # Set by ``people.conversations.conversation_ask``: the conversation and the turn's number.
    conversation_id: int | None = None
    turn: int | None = None
    # The numbered passages the answer was written from (``[n]`` is ``passages[n - 1]``).
    passages: list = field(default_factory=list)
    # Set by ``people.asking``: names of the sources still syncing when the question was answered
    # (``knowledge.selectors.sources_syncing``); the answer may lack what they will bring.
    syncing: list[str] = field(default_factory=list)
    # Set by ``people.asking``: the figures each cited passage holds, by citation number, each
    # ``{"index", "caption", "page", "url"}`` (``people.asking.citation_figures``); none when unset.
    figures: dict[int, list[dict]] = field(default_factory=dict)

    @property
    def pipeline(self) -> str:
        return self.retrieval.pipeline

    @classmethod
    def of(cls, run: RunState) -> AnswerRun:
        """The record of an answering ``run`` that has finished: its answer with its timings
        (``search_ms``, ``answer_ms``, ``total_ms``), retrieval, steps, usage, degradation,
        escalation, scores and passages."""
        answer, search_ms, total_ms = run.answer, run.search_ms, run.elapsed_ms()
        answer.timings_ms = {
            "search_ms": round(search_ms, 2),
            "answer_ms": round(total_ms - search_ms, 2),
            "total_ms": round(total_ms, 2),
        }
        retrieval = RetrievalRun.of(run, total_ms=search_ms)
        return cls(
            answer=answer,
            retrieval=retrieval,
            steps=run.steps,
            usage=run.usage,
            degraded=run.degraded,
            degraded_reason=retrieval.degraded_reason,
            total_ms=total_ms,
            escalation=run.escalation,
            scores=run.scores,
            passages=list(run.passages or []),
        )

    def as_dict(self) -> dict:
        """The API/CLI shape: the answer's fields plus pipeline, trace_id, degraded, steps, usage,
        scores and ``syncing`` (source names still syncing; empty when all are in); each citation
        has its ``figures`` (``[]`` for none)."""
        answer = self.answer.as_dict()
        answer["citations"] = [{**c, "figures": self.figures.get(c["n"], [])} for c in answer["citations"]]
        return {
            **answer,
            "pipeline": self.pipeline,
            "trace_id": self.trace_id,
            "degraded": self.degraded,
            "degraded_reason": self.degraded_reason,
            "steps": [step.as_dict() for step in self.steps],
            "usage": self.usage.as_dict(),
            "scores": self.scores,
            "syncing": self.syncing,
            **({"escalation": self.escalation} if self.escalation else {}),
            **({"conversation_id": self.conversation_id, "turn": self.turn} if self.conversation_id else {}),
        }
