"""Flows: how a pipeline wires its stages from the question to the answer.

Each flow is ``flow(run, question, *, k, reverse_pack, history) -> Flow``, given a
``retrieval.run.RunContext`` (spec, filter, LLM, steps). ``standard`` is rewrite -> retrieve ->
fuse -> pack -> generate; other kinds (SuperRAG's LLM scoring, WalkingRAG's rounds) register
here.
"""

from __future__ import annotations

from django.utils.module_loading import import_string

from retrieval.flows.base import Flow

# kind -> dotted path of its flow function (imported on first use, so flows may import the
# pipeline's helpers without a cycle).
FLOWS = {
    "standard": "retrieval.flows.standard.standard_flow",
    "superrag": "retrieval.flows.superrag.superrag_flow",
    "walkingrag": "retrieval.flows.walkingrag.walkingrag_flow",
    "adaptive": "retrieval.flows.adaptive.adaptive_flow",
}
KINDS = tuple(FLOWS)
# kind -> dotted path of the ranking its search and evaluation runs use,
# ``ranking(run, query, *, k, mode, history) -> (plan, results)``; kinds not named here rank
# with the shared rewrite, retrieve and fuse stages (``retrieval.run.retrieval_stages``).
RANKINGS = {
    "superrag": "retrieval.flows.superrag.superrag_ranking",
}


def flow_for(kind: str):
    """The flow function of ``kind``; ``KeyError`` for an unknown kind (a programming error)."""
    return import_string(FLOWS[kind])


def ranking_for(kind: str):
    """The ranking function of ``kind`` (see ``RANKINGS``)."""
    return import_string(RANKINGS.get(kind, "retrieval.run.retrieval_stages"))


__all__ = ["FLOWS", "KINDS", "RANKINGS", "Flow", "flow_for", "ranking_for"]
