"""Rerank stages: reorder retrieved candidates by a finer judgement than the fused score.

``llm_scoring`` (SuperRAG, seed ``superrag.txt``): the LLM grades every candidate against the
question and quotes the part that answers it; without an LLM, the fused score and the
best-matching sentence stand in.

After fusion every pipeline runs the *signal* rerankers of the run's registry
(``retrieval.registry``: ``KB_SIGNAL_RERANKERS``), in this order, each as its own step when it is
active for the run (``active(state)``):

==================  ===========================================================================
near_duplicates     collapse a near-duplicate cluster to its freshest member
recency             relevance x recency decay x source reliability, with a floor
personal            bounded boost of what the asker prefers and found useful (people.rerank)
diversity           at most m chunks per document/source in the top k, or MMR
==================  ===========================================================================

A signal reranker is a module (named by its dotted path in ``KB_SIGNAL_RERANKERS``, so another
app's module may take its place in the chain) with ``NAME`` (its step), ``Config`` (its settings
part, a frozen dataclass of ``core.schema.setting`` fields), ``active(state) -> bool`` and
``rerank(state, results, *, k) -> (results, summary)`` (results best first, re-ranked 1..n;
summary a JSON-able dict for the trace). The fuse step fetches ``rerank_depth`` results when any
is active, so a reranker can promote a candidate from below the top ``k``; ``Rerank`` cuts the
chain's output to ``k``.
"""

from __future__ import annotations

from retrieval.stages.base import Stage
from retrieval.types import SearchResult

# Results the fuse step hands to the signal rerankers when any is active.
RERANK_DEPTH = 50


def _active(state) -> list:
    return [module for module in state.registry.signal_rerankers if module.active(state)]


def rerank_depth(state, *, k: int) -> int:
    """How many fused results to fetch for a top ``k``: ``max(k, RERANK_DEPTH)`` when a reranker is active."""
    return max(k, RERANK_DEPTH) if _active(state) else k


class Rerank(Stage):
    """The signal rerankers (each a step when active), then the top ``depth`` ranked 1..n."""

    name = "rerank"

    def run(self, state):
        results: list[SearchResult] = state.results
        k = state.depth or state.request.k
        for module in _active(state):
            with state.step(module.NAME) as step:
                results, step.summary = module.rerank(state, results, k=k)
        results = results[:k]
        for rank, result in enumerate(results, 1):
            result.rank = rank
        state.results = results
        return state
