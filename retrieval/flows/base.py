"""What every flow returns."""

from __future__ import annotations

from dataclasses import dataclass

from retrieval.types import Answer, QueryPlan, SearchResult


@dataclass
class Flow:
    """A flow's outcome: the final query plan, the ranked results it used, the answer, and the
    milliseconds spent before generation began (``search_ms``)."""

    plan: QueryPlan
    results: list[SearchResult]
    answer: Answer
    search_ms: float
