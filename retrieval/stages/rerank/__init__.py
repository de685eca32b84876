"""Rerank stages: reorder retrieved candidates by a finer judgement than the fused score.

``llm_scoring`` (SuperRAG, seed ``superrag.txt``): the LLM grades every candidate against the
question and quotes the part that answers it; without an LLM, the fused score and the
best-matching sentence stand in.

After fusion every flow runs the *signal* rerankers below, in this order, each as its own step
when it is active for the run (``active(run)``):

==================  ===========================================================================
near_duplicates     collapse a near-duplicate cluster to its freshest member (issue 8 §1)
recency             relevance x recency decay x source reliability, with a floor (issue 8 §3)
personal            bounded boost of what the asker prefers and found useful (``people.rerank``)
diversity           at most m chunks per document/source in the top k, or MMR (issue 8 §4)
==================  ===========================================================================

Each module has ``active(run) -> bool`` and ``rerank(run, results, *, k) -> (results, summary)``
(results best first, re-ranked 1..n; summary a JSON-able dict for the trace). The fuse step
fetches ``rerank_depth`` results when any is active, so a reranker can promote a candidate from
below the top ``k``; the chain's output is cut to ``k``.
"""

from __future__ import annotations

from importlib import import_module
from types import ModuleType

from retrieval.types import SearchResult

SIGNAL_RERANKERS = ("near_duplicates", "recency", "personal", "diversity")
# Results the fuse step hands to the signal rerankers when any is active.
RERANK_DEPTH = 50
# Signal rerankers that live in an app above retrieval, registered by it when Django starts
# (``personal``: ``people.rerank``, from ``people.apps``); the others are modules of this package.
_REGISTERED: dict[str, ModuleType] = {}


def signal_reranker_register(name: str, module: ModuleType) -> None:
    """Run ``module`` (``active(run)`` and ``rerank(run, results, *, k)``, as this package's modules)
    as the signal reranker ``name``, at that name's place in ``SIGNAL_RERANKERS``; ``ValueError``
    for another name."""
    if name not in SIGNAL_RERANKERS:
        raise ValueError(f"Unknown signal reranker {name!r}; known: {', '.join(SIGNAL_RERANKERS)}.")
    _REGISTERED[name] = module


def _modules(run) -> list:
    modules = [
        (name, _REGISTERED[name] if name in _REGISTERED else import_module(f"retrieval.stages.rerank.{name}"))
        for name in SIGNAL_RERANKERS
        if name in _REGISTERED or name != "personal"
    ]
    return [(name, module) for name, module in modules if module.active(run)]


def rerank_depth(run, *, k: int) -> int:
    """How many fused results to fetch for a top ``k``: ``max(k, RERANK_DEPTH)`` when a reranker is active."""
    return max(k, RERANK_DEPTH) if _modules(run) else k


def rerank_stages(run, results: list[SearchResult], *, k: int) -> list[SearchResult]:
    """Run the active signal rerankers over ``results`` (each a step); the top ``k``, ranked 1..k."""
    for name, module in _modules(run):
        with run.step(name) as step:
            results, step.summary = module.rerank(run, results, k=k)
    results = results[:k]
    for rank, result in enumerate(results, 1):
        result.rank = rank
    return results
