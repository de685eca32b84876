"""The standard flow: rewrite -> retrieve -> fuse -> pack -> generate (every named pipeline but
the seed systems' own)."""

from __future__ import annotations

import time

from retrieval.flows.base import Flow
from retrieval.run import RunContext, generate_stage, pack_stage, retrieval_stages, themes_stage


def standard_flow(
    run: RunContext, question: str, *, k: int, reverse_pack: bool, history: list[str] | None = None
) -> Flow:
    """Retrieve the top ``k`` chunks for ``question``, pack them, and answer from the passages.

    With ``themes`` on, the best ``themes_pool`` are retrieved and reordered by theme first.
    """
    started = time.perf_counter()
    themes = run.spec.themes == "on"
    depth = max(k, run.spec.themes_pool) if themes else k
    plan, results = retrieval_stages(run, question, k=depth, mode=run.spec.mode, history=history)
    if themes:
        results = themes_stage(run, results, k=k)[:k]
    search_ms = (time.perf_counter() - started) * 1000
    passages = pack_stage(run, results, k=k, reverse_pack=reverse_pack)
    answer = generate_stage(run, question, passages, reverse_pack=reverse_pack)
    return Flow(plan=plan, results=results, answer=answer, search_ms=search_ms)
