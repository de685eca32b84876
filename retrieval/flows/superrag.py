"""The SuperRAG flow (seed ``superrag.txt``): retrieve ~50 candidates, let the LLM score each,
answer from the relevant text of the few best.

Steps: (rewrites) -> retrieve -> fuse (``spec.superrag_candidates`` chunks) -> ``llm_score``
(``retrieval.stages.rerank.llm_scoring``: every candidate graded in parallel, quotations
checked against the chunk) -> ``pack`` (the ``spec.superrag_keep`` most confident candidates
at or above ``spec.superrag_threshold``, each a passage whose text is its relevant text,
anchored on its chunk and version) -> ``generate`` (the shared cited or extractive answer).
When no candidate reaches the threshold, the answer says the documents do not contain the
answer and names the sources searched.

Without an LLM the LLM-free counterpart scores (fused score relative to the best, best-matching
sentence); when the LLM fails mid-scoring, the failed candidates keep that score, the run is
degraded, and the answer is made from what was gathered.
"""

from __future__ import annotations

import time
from dataclasses import replace

from knowledge.models import Source
from llm import LLMBadOutput, LLMEmptyReply
from retrieval.flows.base import Flow
from retrieval.run import RunContext, generate_stage, retrieval_stages
from retrieval.stages.generate.cited import NOT_FOUND
from retrieval.stages.rerank.llm_scoring import (
    SCALE_MAX,
    ScoredCandidate,
    candidates_keep,
    candidates_score,
    sentences_best,
)
from retrieval.types import Answer, Passage, QueryPlan, SearchResult

NO_LLM = (
    "no LLM: confidence is the fused score relative to the best candidate's, relevant text the "
    "chunk's sentence most similar to the question"
)
_PREVIEW = 160  # characters of a quotation or reply kept per candidate in the trace


def _preview(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= _PREVIEW else text[: _PREVIEW - 1] + "…"


def score_stage(run: RunContext, question: str, results: list[SearchResult]) -> tuple[list[ScoredCandidate], list]:
    """The ``llm_score`` step: every result scored (``candidates_score``), then the kept ones.

    Returns ``(scored in retrieval order, kept best first)``. The step's summary has the
    candidates scored, the kept chunk ids with their confidence, the dropped (invented)
    quotations, failed scorings and the threshold. A failed scoring degrades the run
    (``run.llm_failed``; after an endpoint failure the rest of the run goes without the LLM).
    """
    spec = run.spec
    with run.step("llm_score") as step:
        llm = run.llm
        scored = candidates_score(
            question,
            results,
            llm=llm,
            embedder=run.tenant.embedder,
            quote_limit=spec.superrag_keep,
        )
        kept = candidates_keep(scored, keep=spec.superrag_keep, threshold=spec.superrag_threshold)
        failed = [c for c in scored if c.error]
        dropped = [c for c in scored if c.dropped_quote]
        if llm is None:
            reason = "LLM unavailable earlier in this run" if run.degraded else "no LLM configured"
            mode = f"{NO_LLM} ({reason})"
        else:
            mode = "llm"
        step.summary = {
            "mode": mode,
            "scale": f"integer 0-{SCALE_MAX} / {SCALE_MAX}" if llm is not None else "fused score / best fused score",
            "candidates": len(scored),
            "scored_by_llm": sum(c.scored_by == "llm" for c in scored),
            "threshold": spec.superrag_threshold,
            "keep": spec.superrag_keep,
            "kept": [[c.chunk_id, round(c.confidence, 4)] for c in kept],
            "dropped_quotes": [{"chunk_id": c.chunk_id, "quote": _preview(c.dropped_quote)} for c in dropped],
            "failed": [{"chunk_id": c.chunk_id, "error": c.error, **_reply(c)} for c in failed[:20]],
            "scores": [
                {
                    "chunk_id": c.chunk_id,
                    "confidence": round(c.confidence, 4),
                    "by": c.scored_by,
                    **({"quote": _preview(c.relevant_text)} if c.scored_by == "llm" and c.relevant_text else {}),
                }
                for c in scored
            ],
        }
        usage = step.usage
        for candidate in scored:
            usage.add(candidate.usage)
        if failed:
            errors = [c.exception for c in failed if c.exception is not None]
            fatal = next((e for e in errors if not isinstance(e, (LLMBadOutput, LLMEmptyReply))), None)
            first = fatal or (errors[0] if errors else None)
            if first is not None:
                run.llm_failed("llm_score", first, step)
            step.error = (
                f"{len(failed)} of {len(scored)} scorings failed (they keep the fused score): {failed[0].error}"
            )
            step.usage = usage  # llm_failed recorded one call's usage; the step made them all
    return scored, kept


def _reply(candidate: ScoredCandidate) -> dict:
    return {"llm_reply": _preview(candidate.reply)} if candidate.reply else {}


def passages_stage(run: RunContext, question: str, kept: list[ScoredCandidate]) -> list[Passage]:
    """The ``pack`` step: one passage per kept candidate, its text the candidate's relevant text.

    A candidate the LLM kept without a quotation it could verify (none given, or invented)
    gets the chunk's sentence most similar to the question instead, so a passage always holds
    the document's own words.
    """
    with run.step("pack") as step:
        missing = [c for c in kept if not c.relevant_text]
        if missing:
            texts = sentences_best(question, [c.chunk.text for c in missing], embedder=run.tenant.embedder)
            filled = {id(c): text for c, text in zip(missing, texts, strict=True)}
        else:
            filled = {}
        passages = []
        quotes = []
        for candidate in kept:
            text = candidate.relevant_text or filled.get(id(candidate), "") or candidate.chunk.text
            chunk = candidate.chunk
            passages.append(Passage(anchor=chunk, text=text, score=candidate.confidence, chunks=[chunk.ordinal]))
            quotes.append("llm" if candidate.relevant_text and candidate.scored_by == "llm" else "best sentence")
        step.summary = {
            "strategy": "superrag relevant text",
            "passages": [
                {"chunk_id": p.anchor.pk, "chunks": p.chunks, "confidence": round(p.score, 4), "text": source}
                for p, source in zip(passages, quotes, strict=True)
            ],
        }
    return passages


def sources_searched(run: RunContext) -> list[str]:
    """Names of the sources the run searched: the filtered ones, else all of the tenant's."""
    sources = Source.objects.for_tenant(run.tenant)
    if run.where.source_ids:
        sources = sources.filter(pk__in=run.where.source_ids)
    return sorted(sources.values_list("name", flat=True))


def not_found_stage(run: RunContext, question: str, scored: list[ScoredCandidate]) -> Answer:
    """The ``generate`` step when no candidate reached the threshold: a not-found answer naming
    the sources searched."""
    with run.step("generate") as step:
        names = sources_searched(run)
        text = f"{NOT_FOUND} Sources searched: {', '.join(names) if names else 'none (no sources)'}."
        best = max((c.confidence for c in scored), default=None)
        mode = "llm" if any(c.scored_by == "llm" for c in scored) else "extractive"
        answer = Answer(question=question, text=text, mode=mode, citations=[], found=False)
        step.summary = {
            "mode": "none",
            "reason": f"no candidate reached the threshold {run.spec.superrag_threshold}",
            "best_confidence": round(best, 4) if best is not None else None,
            "sources": names,
            "citations": [],
        }
    return answer


def _reranked(scored: list[ScoredCandidate]) -> list[SearchResult]:
    """The candidates as results ordered by confidence; ``components["fused"]`` keeps the retrieval rank."""
    ranked = sorted(scored, key=lambda c: (-c.confidence, c.result.rank))
    return [
        replace(
            c.result,
            score=c.confidence,
            rank=rank,
            components={**c.result.components, "fused": {"rank": c.result.rank, "score": round(c.result.score, 6)}},
        )
        for rank, c in enumerate(ranked, start=1)
    ]


def superrag_flow(
    run: RunContext, question: str, *, k: int, reverse_pack: bool, history: list[str] | None = None
) -> Flow:
    """Answer ``question`` SuperRAG's way (module docstring).

    ``k`` is not used: the passage count is ``spec.superrag_keep``. ``Flow.results`` are all
    candidates ordered by confidence; ``Flow.confidence`` is the best LLM confidence (``None``
    when the LLM scored no candidate).
    """
    spec = run.spec
    started = time.perf_counter()
    plan, results = retrieval_stages(run, question, k=spec.superrag_candidates, mode=spec.mode, history=history)
    scored, kept = score_stage(run, question, results)
    search_ms = (time.perf_counter() - started) * 1000
    if kept:
        passages = passages_stage(run, question, kept)
        answer = generate_stage(run, question, passages, reverse_pack=reverse_pack)
    else:
        answer = not_found_stage(run, question, scored)
    by_llm = [c.confidence for c in scored if c.scored_by == "llm"]
    return Flow(
        plan=plan,
        results=_reranked(scored),
        answer=answer,
        search_ms=search_ms,
        confidence=max(by_llm) if by_llm else None,
    )


def superrag_ranking(
    run: RunContext, query: str, *, k: int, mode: str, history: list[str] | None = None
) -> tuple[QueryPlan, list[SearchResult]]:
    """The ranking SuperRAG answers from, for search and evaluation runs: its
    ``spec.superrag_candidates`` candidates graded (``score_stage``) and ordered by confidence,
    best first (LLM grades, or the LLM-free counterpart's fused order), then the rest as
    retrieved; the top ``k``. Lets evaluation runs measure SuperRAG's re-ranking."""
    depth = run.spec.superrag_candidates
    plan, results = retrieval_stages(run, query, k=max(k, depth), mode=mode, history=history)
    scored, _kept = score_stage(run, query, results[:depth])
    ranked = [candidate.result for candidate in sorted(scored, key=lambda candidate: -candidate.confidence)]
    confidence = {candidate.chunk_id: candidate.confidence for candidate in scored}
    ranking = [
        replace(result, score=confidence.get(result.chunk.pk, result.score), rank=rank)
        for rank, result in enumerate(ranked + results[depth:], 1)
    ]
    return plan, ranking[:k]
