"""SuperRAG, a composite stage (seed ``superrag.txt``): retrieve ~50 candidates, let the LLM
score each, answer from the relevant text of the few best.

Steps: (condense) -> retrieve -> fuse (``superrag_candidates`` chunks) -> ``llm_score``
(``retrieval.stages.rerank.llm_scoring``: every candidate graded in parallel, quotations
checked against the chunk) -> ``pack`` (the ``superrag_keep`` most confident candidates
at or above ``superrag_threshold``, each a passage whose text is its relevant text,
anchored on its chunk and version) -> ``generate`` (the shared cited or extractive answer).
When no candidate reaches the threshold, the answer says the documents do not contain the
answer and names the sources searched.

Without an LLM the LLM-free counterpart scores (fused score relative to the best, best-matching
sentence); when the LLM fails mid-scoring, the failed candidates keep that score, the run is
degraded, and the answer is made from what was gathered.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from core.schema import setting
from knowledge.models import Source
from llm import LLMBadOutput, LLMEmptyReply
from retrieval.stages.base import Stage, ranking_run
from retrieval.stages.generate import Generate
from retrieval.stages.generate.cited import NOT_FOUND
from retrieval.stages.pack import text_defang
from retrieval.stages.rerank.llm_scoring import (
    SCALE_MAX,
    ScoredCandidate,
    candidates_keep,
    candidates_score,
    confidence_order,
    sentences_best,
)
from retrieval.types import Answer, Passage, SearchResult

NO_LLM = (
    "no LLM: confidence is the fused score relative to the best candidate's, relevant text the "
    "chunk's sentence most similar to the question"
)
_PREVIEW = 160  # characters of a quotation or reply kept per candidate in the trace


def _preview(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= _PREVIEW else text[: _PREVIEW - 1] + "…"


@dataclass(frozen=True)
class SuperRAGConfig:
    """Settings of the SuperRAG stage."""

    superrag_candidates: int = setting(50, range=(1, 200), integer=True, doc="SuperRAG: candidates the LLM grades")
    superrag_keep: int = setting(5, range=(1, 20), integer=True, doc="SuperRAG: passages the answer is written from")
    superrag_threshold: float = setting(0.5, range=(0.0, 1.0), doc="SuperRAG: confidence a kept passage needs")
    superrag_batch: int = setting(
        10,
        range=(1, 50),
        integer=True,
        doc="SuperRAG: candidates graded per LLM call (1: one call each, with quotations)",
    )
    superrag_budget_s: float = setting(
        45.0, range=(1.0, 3600.0), doc="SuperRAG: seconds of batched grading; later batches keep the fused score"
    )


def _reply(candidate: ScoredCandidate) -> dict:
    return {"llm_reply": _preview(candidate.reply)} if candidate.reply else {}


@dataclass(frozen=True)
class Graded:
    """SuperRAG's own state of a run, kept in ``RunState.memo[GRADED]``: every candidate graded
    (``scored``, retrieval order) and the kept ones (``kept``, best first)."""

    scored: list
    kept: list


GRADED = "superrag.graded"


def graded(state) -> Graded:
    """The run's ``Graded`` (empty before ``LLMScore`` ran)."""
    return state.memo.get(GRADED) or Graded(scored=[], kept=[])


class LLMScore(Stage):
    """The ``llm_score`` step: every result graded (``candidates_score``) and the kept ones (best
    first), left as the run's ``Graded`` (``graded(state)``).

    Its LLM-free fallback is ``candidates_score``'s own: without an LLM each candidate's
    confidence is its fused score relative to the best, its relevant text the chunk's sentence
    most similar to the question (``NO_LLM``); a candidate whose call fails keeps that score.
    The step's summary has the candidates scored, the kept chunk ids with their confidence, the
    dropped (invented) quotations, failed scorings and the threshold. A failed scoring degrades
    the run (``state.llm_failed``; after an endpoint failure the rest of the run goes without
    the LLM).
    """

    name = "llm_score"
    config = SuperRAGConfig

    def apply(self, state, step):
        config = self.settings(state)
        llm = state.llm
        scored = candidates_score(
            state.request.question,
            state.results,
            llm=llm,
            embedder=state.tenant.embedder,
            quote_limit=config.superrag_keep,
            batch=config.superrag_batch,
            budget_s=config.superrag_budget_s,
        )
        kept = candidates_keep(scored, keep=config.superrag_keep, threshold=config.superrag_threshold)
        failed = [c for c in scored if c.error]
        dropped = [c for c in scored if c.dropped_quote]
        step.summary = {
            "mode": "llm" if llm is not None else f"{NO_LLM} ({state.no_llm_reason})",
            "scale": f"integer 0-{SCALE_MAX} / {SCALE_MAX}" if llm is not None else "fused score / best fused score",
            "candidates": len(scored),
            "scored_by_llm": sum(c.scored_by == "llm" for c in scored),
            "batch": config.superrag_batch,
            "over_budget": sum(1 for c in scored if c.unscored),
            "threshold": config.superrag_threshold,
            "keep": config.superrag_keep,
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
                state.llm_failed(self.name, first, step)
            step.error = (
                f"{len(failed)} of {len(scored)} scorings failed (they keep the fused score): {failed[0].error}"
            )
            step.usage = usage  # llm_failed recorded one call's usage; the step made them all
        state.memo[GRADED] = Graded(scored=scored, kept=kept)
        return state


class QuotationPack(Stage):
    """SuperRAG's ``pack`` step: one passage per kept candidate, its text the candidate's relevant text.

    A candidate the LLM kept without a quotation it could verify (none given, or invented)
    gets the chunk's sentence most similar to the question instead, so a passage always holds
    the document's own words. A candidate graded in a batch (no quotation asked for) keeps its
    chunk's whole text.
    """

    name = "pack"
    config = SuperRAGConfig

    def apply(self, state, step):
        kept = graded(state).kept
        batched = self.settings(state).superrag_batch > 1
        whole = {id(c) for c in kept if batched and c.scored_by == "llm" and not c.relevant_text}
        missing = [c for c in kept if not c.relevant_text and id(c) not in whole]
        if missing:
            texts = sentences_best(
                state.request.question, [c.chunk.text for c in missing], embedder=state.tenant.embedder
            )
            filled = {id(c): text for c, text in zip(missing, texts, strict=True)}
        else:
            filled = {}
        passages = []
        quotes = []
        for candidate in kept:
            chunk = candidate.chunk
            text = candidate.relevant_text or filled.get(id(candidate), "") or text_defang(chunk.text)
            passages.append(
                Passage(
                    anchor=chunk,
                    text=text,
                    score=candidate.confidence,
                    chunks=[chunk.ordinal],
                    duplicates=candidate.result.duplicates,
                )
            )
            if id(candidate) in whole:
                quotes.append("whole chunk")
            else:
                quotes.append("llm" if candidate.relevant_text and candidate.scored_by == "llm" else "best sentence")
        step.summary = {
            "strategy": "superrag relevant text",
            "passages": [
                {"chunk_id": p.anchor.pk, "chunks": p.chunks, "confidence": round(p.score, 4), "text": source}
                for p, source in zip(passages, quotes, strict=True)
            ],
        }
        state.passages = passages
        return state


def sources_searched(state) -> list[str]:
    """Names of the sources the run searched: the filtered ones, else all of the tenant's."""
    sources = Source.objects.for_tenant(state.tenant)
    if state.where.source_ids:
        sources = sources.filter(pk__in=state.where.source_ids)
    return sorted(sources.values_list("name", flat=True))


class NotFound(Stage):
    """SuperRAG's ``generate`` step when no candidate reached the threshold: a not-found answer
    naming the sources searched."""

    name = "generate"
    config = SuperRAGConfig

    def apply(self, state, step):
        names = sources_searched(state)
        text = f"{NOT_FOUND} Sources searched: {', '.join(names) if names else 'none (no sources)'}."
        scored = graded(state).scored
        best = max((c.confidence for c in scored), default=None)
        mode = "llm" if any(c.scored_by == "llm" for c in scored) else "extractive"
        state.answer = Answer(question=state.request.question, text=text, mode=mode, citations=[], found=False)
        step.summary = {
            "mode": "none",
            "reason": f"no candidate reached the threshold {self.settings(state).superrag_threshold}",
            "best_confidence": round(best, 4) if best is not None else None,
            "sources": names,
            "citations": [],
        }
        return state


def _reranked(scored: list[ScoredCandidate]) -> list[SearchResult]:
    """The candidates as results in ``confidence_order`` (the LLM-graded first); ``components["fused"]``
    keeps the retrieval rank."""
    ranked = sorted(scored, key=confidence_order)
    return [
        replace(
            c.result,
            score=c.confidence,
            rank=rank,
            components={**c.result.components, "fused": {"rank": c.result.rank, "score": round(c.result.score, 6)}},
        )
        for rank, c in enumerate(ranked, start=1)
    ]


class SuperRAG(Stage):
    """The SuperRAG composite stage (module docstring) over the ``ranking`` stages.

    Answering: ``state.results`` are all candidates ordered by confidence, ``state.confidence``
    the best LLM confidence (``None`` when the LLM scored no candidate); ``k`` is not used (the
    passage count is ``superrag_keep``). Ranking only (search, evaluation): the
    ``superrag_candidates`` candidates graded and ordered by confidence, best first (LLM grades,
    or the fallback's fused order), then the rest as retrieved; the top ``k``.
    """

    name = "superrag"
    config = SuperRAGConfig

    def __init__(self, ranking: tuple):
        self.ranking = ranking
        self.score = LLMScore()
        self.pack = QuotationPack()
        self.generate = Generate()
        self.not_found = NotFound()

    def run(self, state):
        candidates = state.spec.of(SuperRAGConfig).superrag_candidates
        if not state.answering:
            k = state.request.k
            state = ranking_run(state, self.ranking, depth=max(k, candidates))
            results = state.results
            state.results = results[:candidates]
            state = self.score.run(state)
            scored = graded(state).scored
            ranked = [c.result for c in sorted(scored, key=confidence_order)]
            confidence = {c.chunk_id: c.confidence for c in scored}
            ranking = [
                replace(result, score=confidence.get(result.chunk.pk, result.score), rank=rank)
                for rank, result in enumerate(ranked + results[candidates:], 1)
            ]
            state.results = ranking[:k]
            return state
        state = ranking_run(state, self.ranking, depth=candidates)
        state = self.score.run(state)
        state.search_ms = state.elapsed_ms()
        if graded(state).kept:
            state = self.generate.run(self.pack.run(state))
        else:
            state = self.not_found.run(state)
        scored = graded(state).scored
        by_llm = [c.confidence for c in scored if c.scored_by == "llm"]
        state.results = _reranked(scored)
        state.confidence = max(by_llm) if by_llm else None
        return state
