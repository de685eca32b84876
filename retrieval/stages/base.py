"""The one shape of a stage, and how a tuple of stages runs.

A stage has a ``name`` (its step in the trace), the settings part it reads (``config``: a frozen
dataclass of ``core.schema.setting`` fields, or ``None``), ``active(state)`` (whether it runs for
this run; an inactive stage leaves no step) and ``run(state) -> state``. ``Stage`` records the
step around ``apply(state, step)``, which fills ``step.summary`` for the trace. ``wants(state)``
is how many ranked results the stage needs from the ranking before it (0: no opinion).

A stage that calls the LLM is an ``LLMStage``: ``with_llm`` does the work, and ``fallback``,
declared beside it, is its LLM-free counterpart. The fallback runs when the run has no LLM (none
configured, ``use_llm=False``, or lost to an earlier endpoint failure: ``reason`` says which) or
when the call fails (``error``; the run is then marked degraded, ``RunState.llm_failed``).

Composite stages (the signal rerankers' chain, SuperRAG, WalkingRAG, adaptive) override ``run``
and run stages of their own, each recording its own steps.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from llm import LLMError
from retrieval.types import QueryPlan, Step

if TYPE_CHECKING:
    from retrieval.state import RunState


@runtime_checkable
class StageProtocol(Protocol):
    """What the pipeline runner needs of a stage."""

    name: str
    config: type | None

    def active(self, state: RunState) -> bool: ...

    def wants(self, state: RunState) -> int: ...

    def run(self, state: RunState) -> RunState: ...


class Stage:
    """A traced stage: ``run`` records the step ``name`` around ``apply``."""

    name: str = ""
    config: type | None = None

    def active(self, state: RunState) -> bool:
        return True

    def wants(self, state: RunState) -> int:
        return 0

    def settings(self, state: RunState) -> Any:
        """This stage's settings part for the run (``config`` from the run's spec)."""
        return state.spec.of(self.config)

    def run(self, state: RunState) -> RunState:
        with state.step(self.name) as step:
            return self.apply(state, step)

    def apply(self, state: RunState, step: Step) -> RunState:
        raise NotImplementedError

    def __repr__(self) -> str:
        return f"<stage {self.name}>"


class LLMStage(Stage):
    """A stage with an LLM path and its LLM-free ``fallback`` (see the module docstring)."""

    def apply(self, state: RunState, step: Step) -> RunState:
        if state.llm is None:
            return self.fallback(state, step, reason=state.no_llm_reason, error=None)
        try:
            return self.with_llm(state, step)
        except LLMError as exc:
            state.llm_failed(self.name, exc, step)
            return self.fallback(state, step, reason=str(exc), error=exc)

    def with_llm(self, state: RunState, step: Step) -> RunState:
        raise NotImplementedError

    def fallback(self, state: RunState, step: Step, *, reason: str, error: LLMError | None) -> RunState:
        raise NotImplementedError


def llm_reply(error: LLMError | None) -> dict:
    """``{"llm_reply": ...}`` for a trace when ``error`` carries the LLM's unusable reply, else ``{}``."""
    reply = getattr(error, "reply", None)
    return {"llm_reply": reply} if reply else {}


def stages_run(state: RunState, stages: tuple) -> RunState:
    """Run the active ones of ``stages`` in order on ``state``; the state they leave."""
    for stage in stages:
        if stage.active(state):
            state = stage.run(state)
    return state


def depth_for(state: RunState, stages: tuple) -> int:
    """How many ranked results ``stages`` need: the run's ``k``, or more when a stage wants more."""
    return max([state.request.k, *(stage.wants(state) for stage in stages)])


def ranking_run(state: RunState, stages: tuple, *, depth: int) -> RunState:
    """Run the ranking ``stages`` from the question as asked (a fresh plan), delivering ``depth``
    results; composite stages use it for each retrieval they make."""
    state.plan = QueryPlan.from_question(state.request.question)
    state.depth = depth
    return stages_run(state, stages)
