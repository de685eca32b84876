"""What every flow returns."""

from __future__ import annotations

from dataclasses import dataclass, field

from retrieval.types import Answer, QueryPlan, SearchResult


@dataclass
class Flow:
    """A flow's outcome: the final query plan, the ranked results it used, the answer, and the
    milliseconds spent before generation began (``search_ms``).

    ``confidence`` (0-1, optional) is how sure the flow is that its evidence answers the
    question (SuperRAG: the best LLM confidence); ``escalation`` (adaptive) says which level
    answered and why.
    """

    plan: QueryPlan
    results: list[SearchResult]
    answer: Answer
    search_ms: float
    confidence: float | None = None
    escalation: dict = field(default_factory=dict)
