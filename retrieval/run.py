"""One pipeline run's state (``RunContext``) and the stages every flow shares, each run as a step.

``retrieval.pipeline`` builds the context; flows (``retrieval.flows``) call these helpers:
``retrieval_stages`` (rewrite, retrieve, fuse), ``pack_stage`` and ``generate_stage``.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from contextlib import contextmanager

from llm import LLMBadOutput, LLMEmptyReply, LLMError, Usage
from retrieval import hooks
from retrieval.stages import pack
from retrieval.stages.fuse import candidates_fuse, results_fetch
from retrieval.stages.generate.cited import NOT_FOUND, answer_generate, answer_stream
from retrieval.stages.generate.extractive import DEGRADED_LABEL, answer_extract
from retrieval.stages.rerank import rerank_depth, rerank_stages
from retrieval.stages.retrieve.candidates import candidates_retrieve
from retrieval.stages.retrieve.filters import RetrievalFilter
from retrieval.stages.rewrite.condense import query_condense
from retrieval.stages.rewrite.expand import query_expand_llm, query_expand_rm3
from retrieval.stages.rewrite.hyde import query_hyde
from retrieval.stages.rewrite.rephrase import query_rephrase
from retrieval.stages.themes import results_by_theme
from retrieval.types import Answer, Passage, QueryPlan, SearchResult, Step

logger = logging.getLogger(__name__)


class RunContext:
    """The mutable state of one run: its steps, LLM usage, LLM client and degradation reasons.

    Stages record themselves with ``with run.step(name) as step:`` (fill ``step.summary``,
    ``step.usage``); ``emit(event, data)`` is told of every finished step (``"step"``) and, when a
    stage streams, of answer text (``"token"``), so a caller can stream the run as it happens.
    """

    def __init__(
        self,
        *,
        tenant,
        spec,
        where: RetrievalFilter,
        llm,
        emit: Callable[[str, dict], None] | None = None,
        user=None,
        options: dict | None = None,
    ):
        self.tenant = tenant
        self.user = user if getattr(user, "is_authenticated", False) else None
        # Per-request switches (``RequestOptions`` keys: personalize, collapse, ...).
        self.options = dict(options or {})
        self.emit = emit
        self.spec = spec
        self.where = where
        self.llm = llm
        self.steps: list[Step] = []
        self.usage = Usage()
        self.reasons: list[str] = []
        self.timings: dict[str, float] = {}

    @contextmanager
    def step(self, stage: str):
        record = Step(stage=stage, ms=0.0)
        started = time.perf_counter()
        try:
            yield record
        finally:
            record.ms = (time.perf_counter() - started) * 1000
            self.steps.append(record)
            self.usage.add(record.usage)
            if self.emit is not None:
                self.emit("step", {**record.as_dict(), "summary": record.summary})

    @property
    def streaming(self) -> bool:
        return self.emit is not None

    def llm_failed(self, stage: str, error: LLMError, step: Step) -> None:
        """Record an LLM failure on ``step``. When the endpoint itself failed (timeout, refused,
        5xx, open circuit) the rest of the run goes without the LLM; after a malformed or empty
        reply the next stages may still call it."""
        step.error = str(error)
        if error.usage is not None:
            step.usage = error.usage
        self.reasons.append(f"{stage}: {error}")
        if not isinstance(error, (LLMBadOutput, LLMEmptyReply)):
            self.llm = None
        logger.warning("Pipeline %s degraded at %s: %s", self.spec.name, stage, error)

    @property
    def degraded(self) -> bool:
        return bool(self.reasons)


def query_rewrite(run: RunContext, plan: QueryPlan, stage: str, *, history: list[str] | None) -> QueryPlan:
    """Run rewrite ``stage`` (rephrase, expand, hyde) on ``plan`` as a step; LLM failures fall back."""
    spec = run.spec
    with run.step(stage) as step:
        use_rm3 = stage == "expand" and (spec.expansion == "rm3" or (spec.expansion == "auto" and run.llm is None))
        if not use_rm3 and run.llm is None:
            reason = "LLM unavailable earlier in this run" if run.degraded else "no LLM configured"
            if stage == "expand":  # LLM expansion asked for but impossible: the LLM-free counterpart
                use_rm3 = True
            else:
                step.summary = {"skipped": reason}
                return plan
        try:
            if use_rm3:
                plan, step.usage, step.summary = query_expand_rm3(
                    plan,
                    where=run.where,
                    config=spec.search,
                    fb_docs=spec.rm3_fb_docs,
                    fb_terms=spec.rm3_fb_terms,
                    original_weight=spec.rm3_original_weight,
                )
            elif stage == "rephrase":
                plan, step.usage, step.summary = query_rephrase(plan, llm=run.llm, history=history)
            elif stage == "expand":
                plan, step.usage, step.summary = query_expand_llm(plan, llm=run.llm, weight=spec.llm_expansion_weight)
            else:
                plan, step.usage, step.summary = query_hyde(
                    plan, llm=run.llm, embedder=run.tenant.embedder, mix=spec.hyde_mix
                )
        except LLMError as exc:
            run.llm_failed(stage, exc, step)
            reply = {"llm_reply": exc.reply} if getattr(exc, "reply", None) else {}
            if stage == "expand":
                plan, _, summary = query_expand_rm3(plan, where=run.where, config=spec.search)
                step.summary = {**summary, "fallback": "rm3", **reply}
            else:
                step.summary = {"fallback": "the question as asked", **reply}
    return plan


def _top(ranking, n: int = 20) -> list[list]:
    return [[item, round(score, 5)] for item, score in ranking[:n]]


def candidates_stages(
    run: RunContext, plan: QueryPlan, *, k: int, mode: str, concurrent: bool = True
) -> list[SearchResult]:
    """The retrieve and fuse steps for ``plan``: the top ``k`` results, best first.

    ``concurrent`` embeds the query while BM25 runs (hybrid mode; ``candidates_retrieve``).
    """
    spec = run.spec
    limit = max(spec.search.candidates, k)
    depth = rerank_depth(run, k=k)
    with run.step("retrieve") as step:
        candidates, timings = candidates_retrieve(
            plan,
            where=run.where,
            embedder=run.tenant.embedder,
            mode=mode,
            config=spec.search,
            limit=limit,
            concurrent=concurrent,
        )
        run.timings.update(timings)
        queries: dict = {}
        if mode != "dense":
            queries["lexical"] = (
                {t: round(w, 4) for t, w in plan.lexical_terms.items()} if plan.lexical_terms else plan.lexical_query
            )
        if mode != "lexical":
            queries["dense"] = "HyDE vector" if plan.dense_vector is not None else plan.dense_text
        step.summary = {
            "mode": mode,
            "filter": run.where.summary(),
            "queries": queries,
            "candidates": {name: _top(ranked) for name, ranked in candidates.lists.items()},
            "counts": {name: len(ranked) for name, ranked in candidates.lists.items()},
        }
    with run.step("fuse") as step:
        started = time.perf_counter()
        ranking = candidates_fuse(candidates, spec.search)
        run.timings["fusion_ms"] = (time.perf_counter() - started) * 1000
        started = time.perf_counter()
        results = results_fetch(tenant=run.tenant, ranking=ranking, candidates=candidates, k=depth)
        run.timings["fetch_ms"] = (time.perf_counter() - started) * 1000
        step.summary = {
            "fusion": spec.search.fusion if len(candidates.lists) > 1 else "none",
            "kept": [[r.chunk.pk, round(r.score, 5)] for r in results[:20]],
        }
    return rerank_stages(run, results, k=k)


def retrieval_stages(
    run: RunContext, question: str, *, k: int, mode: str, history: list[str] | None = None
) -> tuple[QueryPlan, list[SearchResult]]:
    """The spec's rewrite stages, then retrieve and fuse: (final plan, top ``k`` results).

    ``history`` (the conversation's earlier questions, oldest first) makes a follow-up
    standalone first (``condense_stage``).
    """
    plan = QueryPlan.from_question(question)
    if history:
        plan = condense_stage(run, plan, history)
    for stage in run.spec.rewrites:
        plan = query_rewrite(run, plan, stage, history=history)
    return plan, candidates_stages(run, plan, k=k, mode=mode)


def condense_stage(run: RunContext, plan: QueryPlan, history: list[str]) -> QueryPlan:
    """The condense step of a follow-up question: the LLM rephrases it from the conversation
    (``query_rephrase``) when an LLM is configured, else, or when that fails, the earlier
    questions' key terms are carried into the query (``query_condense``). Skipped when the
    pipeline's own rephrase stage will do it with the LLM."""
    if "rephrase" in run.spec.rewrites and run.llm is not None:
        return plan
    with run.step("condense") as step:
        fallback = {}
        if run.llm is not None:
            try:
                rephrased, step.usage, summary = query_rephrase(plan, llm=run.llm, history=history)
            except LLMError as exc:
                run.llm_failed("condense", exc, step)
                fallback = {"fallback": "key terms"}
            else:
                step.summary = {"by": "llm", "history": len(history), **summary}
                return rephrased
        plan, summary = query_condense(plan, history=history)
        step.summary = {"by": "key terms", "history": len(history), **summary, **fallback}
    return plan


def pack_stage(run: RunContext, results: list[SearchResult], *, k: int, reverse_pack: bool) -> list[Passage]:
    """The pack step: the first ``k`` results as passages, by the spec's strategy (top_n, window)."""
    spec = run.spec
    with run.step("pack") as step:
        if spec.strategy == "window":
            passages = pack.window(run.tenant, results, n=k, size=spec.window_size)
        else:
            passages = pack.top_n(results, n=k)
        step.summary = {
            "strategy": spec.strategy,
            "window": spec.window_size if spec.strategy == "window" else None,
            "reverse_pack": reverse_pack,
            "passages": [{"chunk_id": p.anchor.pk, "chunks": p.chunks} for p in passages],
        }
    return passages


def themes_stage(run: RunContext, results: list[SearchResult], *, k: int) -> list[SearchResult]:
    """The themes step (``retrieval.stages.themes``): ``results`` reordered so the first ``k``
    hold the best chunk of each theme of a broad question; unchanged when few candidates pass."""
    spec = run.spec
    with run.step("themes") as step:
        results, step.summary = results_by_theme(
            results[: spec.themes_pool],
            tenant_id=run.tenant.pk,
            k=k,
            threshold=spec.themes_threshold,
            distance=spec.themes_distance,
        )
    return results


def user_layer_for(run: RunContext, question: str) -> str | None:
    """The answer prompt's user layer (the ``user_layer`` hook: ``people.personalization.user_layer_compose``)
    when the request personalizes and someone is signed in, else ``None``; its summary goes to
    ``run.user_layer_summary`` (``None`` when off) for the generate step's trace."""
    run.user_layer_summary = None
    if not run.options.get("personalize", True) or run.user is None or hooks.person.user_layer is None:
        return None
    layer = hooks.person.user_layer(tenant=run.tenant, user=run.user, where=run.where, question=question)
    if layer is None:
        return None
    text, run.user_layer_summary = layer
    return text


def generate_stage(run: RunContext, question: str, passages: list[Passage], *, reverse_pack: bool) -> Answer:
    """The generate step: the LLM's cited answer (streamed as ``token`` events when the run
    streams), or the extractive answer without an LLM or when the LLM fails (then degraded)."""
    with run.step("generate") as step:
        if not passages:
            answer = Answer(question=question, text=NOT_FOUND, mode="extractive", citations=[], found=False)
            step.summary = {"mode": "none", "reason": "no passages"}
        else:
            answer = None
            if run.llm is not None:
                user_layer = user_layer_for(run, question)  # issue 9 §2 (b): None unless personalized
                try:
                    if run.streaming:
                        tokens = answer_stream(
                            question, passages, llm=run.llm, reverse_pack=reverse_pack, user_layer=user_layer
                        )
                        while True:
                            try:
                                run.emit("token", {"text": next(tokens)})
                            except StopIteration as done:
                                answer = done.value
                                break
                        step.usage = run.llm.last_stream_usage or Usage(llm_calls=1)
                    else:
                        answer, step.usage = answer_generate(
                            question, passages, llm=run.llm, reverse_pack=reverse_pack, user_layer=user_layer
                        )
                    step.summary = {"mode": "llm", "model": getattr(run.llm, "name", ""), "reply": answer.text}
                    step.summary["user_layer"] = run.user_layer_summary
                except LLMError as exc:
                    run.llm_failed("generate", exc, step)
            if answer is None:
                kwargs = {"label": DEGRADED_LABEL} if run.degraded else {}
                answer = answer_extract(question, passages, embedder=run.tenant.embedder, **kwargs)
                step.summary = {"mode": "extractive", **({"fallback": True} if run.degraded else {})}
        step.summary["citations"] = [c.n for c in answer.citations]
    return answer
