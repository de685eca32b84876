"""Settings of the WalkingRAG stage (``retrieval.walks.stage``), one part of a pipeline's settings
(``retrieval.schema``): rounds, chunks read for facts, where the answer's passages come from."""

from __future__ import annotations

from dataclasses import dataclass

from core.schema import setting

MAX_PASSAGES = 20  # passages the final answer is written from


@dataclass(frozen=True)
class WalkConfig:
    """Settings of the WalkingRAG stage."""

    walk_max_rounds: int = setting(3, range=(1, 10), integer=True, doc="WalkingRAG: rounds of retrieval at most")
    walk_facts_from: int = setting(
        2,
        range=(1, 20),
        integer=True,
        doc="WalkingRAG: chunks per query the LLM reads for facts each round (the best of the k read)",
    )
    walk_answer_from: str = setting(
        "chunks",
        choices=("chunks", "facts"),
        doc="WalkingRAG: answer from the text of the chunks that yielded facts, or from the facts themselves",
    )
    walk_answer_fill: int = setting(
        MAX_PASSAGES,
        range=(0, MAX_PASSAGES),
        integer=True,
        doc=(
            "WalkingRAG: the answer's passages are the chunks that yielded facts and the entity hop's, "
            "then other chunks read until there are this many (at most k, so the default fills up to k; "
            "0: no others)"
        ),
    )
    walk_entity_hop: int = setting(
        2,
        range=(0, 5),
        integer=True,
        doc="WalkingRAG: bridge entities (named in facts, not in the question) searched once more, LLM-free",
    )
