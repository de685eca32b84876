"""The state of one pipeline run: what every stage reads and writes, and the run's record.

A pipeline (``retrieval.pipeline``) is a tuple of stages (``retrieval.stages.base.Stage``); each
takes the ``RunState`` and returns it with its part filled in: rewrites leave ``plan``, retrieve
leaves ``candidates``, fuse ``results``, the rerankers reorder ``results``, pack leaves
``passages``, generate ``answer``. The run's record (``steps``, ``usage``, ``reasons``,
``timings``) grows as stages run; ``emit`` is told of every finished step (``"step"``) and, when
a stage streams, of answer text (``"token"``), so a caller can stream the run as it happens.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from llm import LLMBadOutput, LLMEmptyReply, LLMError, Usage
from retrieval.filters import RetrievalFilter
from retrieval.registry import Registry, registry_configured
from retrieval.request import AnswerRequest
from retrieval.tracing import step_recorded, step_span
from retrieval.types import Answer, CandidateLists, Passage, QueryPlan, SearchResult, Step

logger = logging.getLogger(__name__)

# Why a stage went without the LLM: an earlier stage's endpoint failure, or none configured.
LLM_LOST = "LLM unavailable earlier in this run"
NO_LLM = "no LLM configured"


@dataclass
class RunState:
    """One run of a pipeline, from the question to the ranked chunks or the cited answer.

    Set up by ``retrieval.pipeline``: ``request`` (what is asked, ``retrieval.request.AnswerRequest``:
    the question, ``k``, history, the per-request switches; stages read it there), ``tenant``,
    ``spec`` (the pipeline and the tenant's settings, ``retrieval.schema.PipelineSpec``),
    ``where`` (the shared retrieval filter), ``llm`` (an ``LLMClient`` or ``None``; dropped after
    an endpoint failure), ``user`` (signed-in asker or ``None``), ``mode`` (the request's retrieval
    mode, else the spec's) and ``answering`` (false: stop at the ranking). A stage's own working
    state stays in ``memo`` under the stage's name (SuperRAG's graded candidates, for one).
    """

    request: AnswerRequest
    tenant: Any
    spec: Any
    where: RetrievalFilter
    llm: Any = None
    user: Any = None
    emit: Callable[[str, dict], None] | None = None
    # Results the ranking stages deliver: the request's ``k``, or more when a later stage wants
    # more (themes).
    depth: int = 0
    mode: str = "hybrid"
    answering: bool = False
    # What the stages leave.
    plan: QueryPlan | None = None
    candidates: CandidateLists | None = None
    results: list[SearchResult] = field(default_factory=list)
    passages: list[Passage] = field(default_factory=list)
    answer: Answer | None = None
    # How sure the run is that its evidence answers the question (0-1; SuperRAG's best LLM
    # confidence, the adaptive level's), and which adaptive level answered and why.
    confidence: float | None = None
    escalation: dict = field(default_factory=dict)
    # Milliseconds from the start of the run to the end of retrieval (before packing).
    search_ms: float = 0.0
    # Answer-quality scores (``retrieval.stages.score``) when ``KB_SCORE_ANSWERS`` is on.
    scores: dict | None = None
    # The record.
    steps: list[Step] = field(default_factory=list)
    usage: Usage = field(default_factory=Usage)
    reasons: list[str] = field(default_factory=list)
    timings: dict[str, float] = field(default_factory=dict)
    # Values a stage computes once per run and reads again (keyed by the stage's name), e.g. the
    # asker's personal signals or whether the tenant holds any duplicate.
    memo: dict[str, Any] = field(default_factory=dict)
    # Called with the trace id (``None`` when untraced) once the answer's trace is written: what a
    # stage ends after its run (a WalkingRAG walk, ``retrieval.walks.recorder``).
    after_trace: list[Callable[[int | None], None]] = field(default_factory=list)
    # What the run calls from outside retrieval (signal rerankers, person hooks, memory retriever).
    registry: Registry = field(default_factory=registry_configured)
    started: float = field(default_factory=time.perf_counter)

    def __post_init__(self):
        if not getattr(self.user, "is_authenticated", False):
            self.user = None

    @contextmanager
    def step(self, stage: str):
        """Record ``stage`` as a step: ``with state.step(name) as step:`` then fill
        ``step.summary`` (and ``step.usage``, ``step.error``)."""
        record = Step(stage=stage, ms=0.0)
        with step_span(self, record):  # its OpenTelemetry span, when telemetry is on
            started = time.perf_counter()
            try:
                yield record
            finally:
                record.ms = (time.perf_counter() - started) * 1000
                self.step_add(record)

    def step_add(self, record: Step) -> None:
        """Add a finished step (``record.ms`` already measured) to the run's record: its LLM usage
        counted, ``emit`` told (``"step"``)."""
        self.steps.append(record)
        self.usage.add(record.usage)
        step_recorded(self, record)
        if self.emit is not None:
            self.emit("step", {**record.as_dict(), "summary": record.summary})

    @property
    def streaming(self) -> bool:
        return self.emit is not None

    @property
    def degraded(self) -> bool:
        return bool(self.reasons)

    @property
    def no_llm_reason(self) -> str:
        """Why the run has no LLM now: lost to an earlier failure, or none configured."""
        return LLM_LOST if self.degraded else NO_LLM

    def llm_failed(self, stage: str, error: LLMError, step: Step) -> None:
        """Record an LLM failure on ``step``. When the endpoint itself failed (timeout, refused,
        5xx, open circuit) the rest of the run goes without the LLM; after a malformed or empty
        reply the next stages may still call it."""
        step.error = str(error)
        if error.usage is not None:
            step.usage = error.usage
        self.reasons.append(f"{stage}: {error}")
        if not isinstance(error, (LLMBadOutput, LLMEmptyReply)):
            self.llm = None
        logger.warning("Pipeline %s degraded at %s: %s", self.spec.name, stage, error)

    def elapsed_ms(self) -> float:
        return (time.perf_counter() - self.started) * 1000
