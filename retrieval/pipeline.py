"""Named pipelines of typed stages: rewrite -> retrieve -> fuse -> pack -> generate, traced.

A pipeline is a ``PipelineSpec``: which rewrite stages run (``rephrase``, ``expand``, ``hyde``),
the retrieval mode, the search settings and the packing strategy. ``pipeline_retrieve`` runs it
up to the ranked chunks (search, evaluation); ``pipeline_answer`` runs it to a cited answer and
records a trace. Every stage reports a ``Step`` (stage, ms, summary, error, LLM usage).

The named pipelines (seeds ``advanced-rag-querying.txt`` and ``magic-of-rag-retrieval.txt``):

=========  ==================================================================================
simple     hybrid search of the question (0.7 dense / 0.3 BM25), window packing (the default)
rephrase   the LLM rewrites the question into a detailed search query first
expand     OR-expansion of the lexical query: LLM synonyms, or RM3 without an LLM
hyde       the dense side searches the embedding of an LLM-written hypothetical passage
advanced   rephrase + expand + hybrid + window
=========  ==================================================================================

Which pipeline runs: the request's, else ``Tenant.retrieval_config["pipeline"]``, else
``KB_PIPELINE``. Failure never loses the answer: when an LLM stage fails, the run goes on with
the stage's LLM-free counterpart (the question as it was, RM3 for expansion, the extractive
answer), stops calling the LLM for the rest of the run, and is marked ``degraded`` with the
reason.
"""

from __future__ import annotations

import logging
import time
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field, fields, replace

from django.conf import settings

from core.errors import InvalidInput
from retrieval.config import MAX_QUERY_CHARS, MODES, SearchConfig
from retrieval.llm import LLMBadOutput, LLMEmptyReply, LLMError, configured_llm
from retrieval.stages import pack
from retrieval.stages.fuse import candidates_fuse, results_fetch
from retrieval.stages.generate.cited import NOT_FOUND, answer_generate
from retrieval.stages.generate.extractive import DEGRADED_LABEL, answer_extract
from retrieval.stages.retrieve.candidates import candidates_retrieve
from retrieval.stages.retrieve.filters import RetrievalFilter
from retrieval.stages.rewrite.expand import query_expand_llm, query_expand_rm3
from retrieval.stages.rewrite.hyde import query_hyde
from retrieval.stages.rewrite.rephrase import query_rephrase
from retrieval.types import Answer, QueryPlan, SearchResult, Step, Usage

logger = logging.getLogger(__name__)

PIPELINE_NAMES = ("simple", "rephrase", "expand", "hyde", "advanced")
REWRITES = {
    "simple": (),
    "rephrase": ("rephrase",),
    "expand": ("expand",),
    "hyde": ("hyde",),
    "advanced": ("rephrase", "expand"),
}
EXPANSIONS = ("auto", "llm", "rm3")
# ``llm`` argument default: the configured endpoint (``KB_LLM_MODEL``), or none.
CONFIGURED = object()


@dataclass(frozen=True)
class PipelineSpec:
    """A pipeline's full configuration. ``as_config()`` is what runs and traces record.

    ``rewrites`` run in order; ``mode`` is hybrid, lexical or dense; ``strategy`` (top_n or
    window) and ``window_size`` shape the answer's context; ``expansion`` is auto (LLM when one
    is configured, else RM3), llm or rm3; ``rm3_*`` are RM3's parameters (Anserini defaults);
    ``llm_expansion_weight`` weighs LLM-added terms; ``hyde_mix`` is the HyDE passage's share of
    the dense query vector.
    """

    name: str = "simple"
    rewrites: tuple[str, ...] = ()
    mode: str = "hybrid"
    strategy: str = "window"
    window_size: int = 1
    expansion: str = "auto"
    rm3_fb_docs: int = 10
    rm3_fb_terms: int = 10
    rm3_original_weight: float = 0.5
    llm_expansion_weight: float = 0.5
    hyde_mix: float = 0.5
    search: SearchConfig = field(default_factory=SearchConfig)

    def as_config(self) -> dict:
        data = asdict(self)
        data["rewrites"] = list(self.rewrites)
        return data


_OPTION_RULES = {
    "mode": MODES,
    "strategy": pack.STRATEGIES,
    "expansion": EXPANSIONS,
    "window_size": (0, 10),
    "rm3_fb_docs": (1, 100),
    "rm3_fb_terms": (1, 100),
    "rm3_original_weight": (0.0, 1.0),
    "llm_expansion_weight": (0.0, 1.0),
    "hyde_mix": (0.0, 1.0),
}
SETTING_KEYS = ("pipeline", *_OPTION_RULES, *(f.name for f in fields(SearchConfig)))


def _option(name: str, value):
    rule = _OPTION_RULES[name]
    if isinstance(rule[0], str):
        if value not in rule:
            raise InvalidInput(f"Setting {name!r} must be one of {', '.join(rule)}, not {value!r}.")
        return value
    low, high = rule
    wants_int = isinstance(low, int) and not isinstance(low, float)
    ok = isinstance(value, int) if wants_int else isinstance(value, (int, float))
    if isinstance(value, bool) or not ok or not low <= value <= high:
        kind = "an integer" if wants_int else "a number"
        raise InvalidInput(f"Setting {name!r} must be {kind} between {low} and {high}, not {value!r}.")
    return value if wants_int else float(value)


def pipeline_spec(*, tenant, name: str | None = None, overrides: dict | None = None) -> PipelineSpec:
    """The pipeline to run for ``tenant``: ``name``, else the tenant's default, else ``KB_PIPELINE``.

    Settings layer as defaults < ``KB_FUSION`` < ``tenant.retrieval_config`` < ``overrides``
    (keys: ``SETTING_KEYS``). ``InvalidInput`` naming the key for an unknown pipeline, an
    unknown key or a bad value.
    """
    stored = dict(tenant.retrieval_config or {}) if tenant is not None else {}
    wanted = {**stored, **(overrides or {})}
    if not isinstance(wanted.get("pipeline", ""), str):
        raise InvalidInput("Setting 'pipeline' must be a pipeline name.")
    name = name or wanted.get("pipeline") or settings.KB_PIPELINE
    if name not in PIPELINE_NAMES:
        raise InvalidInput(f"Unknown pipeline {name!r}; use one of {', '.join(PIPELINE_NAMES)}.")
    unknown = sorted(set(wanted) - set(SETTING_KEYS))
    if unknown:
        raise InvalidInput(f"Unknown retrieval setting(s): {', '.join(unknown)}.")
    options = {k: _option(k, v) for k, v in wanted.items() if k in _OPTION_RULES}
    search_values = {"fusion": settings.KB_FUSION}
    search_values.update({k: v for k, v in wanted.items() if k not in _OPTION_RULES and k != "pipeline"})
    search = SearchConfig.from_dict(search_values)
    return PipelineSpec(name=name, rewrites=REWRITES[name], search=search, **options)


@dataclass
class RetrievalRun:
    """The ranked chunks of a pipeline run and how they were found.

    ``results`` best first; ``steps`` one per stage; ``usage`` the LLM usage of the whole run;
    ``degraded`` true when an LLM stage failed (``degraded_reason`` says which and why);
    ``total_ms`` the wall time of all stages; ``timings_ms`` per retriever and stage.
    """

    pipeline: str
    spec: PipelineSpec
    plan: QueryPlan
    results: list[SearchResult]
    steps: list[Step]
    usage: Usage
    degraded: bool
    degraded_reason: str
    total_ms: float
    timings_ms: dict[str, float]


@dataclass
class AnswerRun:
    """A cited answer with its pipeline, steps, LLM usage, degradation and trace id."""

    answer: Answer
    retrieval: RetrievalRun
    steps: list[Step]
    usage: Usage
    degraded: bool
    degraded_reason: str
    total_ms: float
    trace_id: int | None = None

    @property
    def pipeline(self) -> str:
        return self.retrieval.pipeline

    def as_dict(self) -> dict:
        """The API/CLI shape: the answer's fields plus pipeline, trace_id, degraded, steps, usage."""
        return {
            **self.answer.as_dict(),
            "pipeline": self.pipeline,
            "trace_id": self.trace_id,
            "degraded": self.degraded,
            "degraded_reason": self.degraded_reason,
            "steps": [step.as_dict() for step in self.steps],
            "usage": self.usage.as_dict(),
        }


class _Run:
    """The mutable state of one run: its steps, usage, LLM and degradation reasons."""

    def __init__(self, *, tenant, spec: PipelineSpec, where: RetrievalFilter, llm):
        self.tenant = tenant
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


def _rewrite(run: _Run, plan: QueryPlan, stage: str, *, history: list[str] | None) -> QueryPlan:
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


def _retrieve(run: _Run, plan: QueryPlan, *, k: int, mode: str) -> list[SearchResult]:
    spec = run.spec
    limit = max(spec.search.candidates, k)
    with run.step("retrieve") as step:
        candidates, timings = candidates_retrieve(
            plan, where=run.where, embedder=run.tenant.embedder, mode=mode, config=spec.search, limit=limit
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
        results = results_fetch(tenant=run.tenant, ranking=ranking, candidates=candidates, k=k)
        run.timings["fetch_ms"] = (time.perf_counter() - started) * 1000
        step.summary = {
            "fusion": spec.search.fusion if len(candidates.lists) > 1 else "none",
            "kept": [[r.chunk.pk, round(r.score, 5)] for r in results[:20]],
        }
    return results


def _question_check(question: str, *, label: str = "question") -> str:
    question = (question or "").strip()
    if not question:
        raise InvalidInput(f"The {label} is empty.")
    if len(question) > MAX_QUERY_CHARS:
        raise InvalidInput(f"The {label} is longer than {MAX_QUERY_CHARS} characters.")
    return question


def _llm_for(llm, use_llm: bool):
    if not use_llm:
        return None
    return configured_llm() if llm is CONFIGURED else llm


def _spec_for(tenant, pipeline, overrides) -> PipelineSpec:
    if isinstance(pipeline, PipelineSpec):
        return pipeline
    return pipeline_spec(tenant=tenant, name=pipeline, overrides=overrides)


def _run_retrieval(run: _Run, question: str, *, k: int, mode: str, history) -> tuple[QueryPlan, list[SearchResult]]:
    plan = QueryPlan.from_question(question)
    for stage in run.spec.rewrites:
        plan = _rewrite(run, plan, stage, history=history)
    return plan, _retrieve(run, plan, k=k, mode=mode)


def pipeline_retrieve(
    *,
    tenant,
    query: str,
    pipeline: str | PipelineSpec | None = None,
    k: int = 10,
    mode: str | None = None,
    source_ids: list[int] | None = None,
    overrides: dict | None = None,
    llm=CONFIGURED,
    use_llm: bool = True,
    history: list[str] | None = None,
) -> RetrievalRun:
    """Run a pipeline's rewrite, retrieve and fuse stages; the top ``k`` chunks, best first.

    ``mode`` overrides the pipeline's retrieval mode; ``source_ids`` keeps only those sources;
    ``llm`` is an ``LLMClient`` (default: the configured one; ``None`` or ``use_llm=False``: no
    LLM). ``InvalidInput`` for an empty or over-long query, ``k`` outside 1-200, an unknown mode
    or pipeline. LLM failures degrade (see the module docstring), never raise.
    """
    query = _question_check(query, label="query")
    if not 1 <= k <= 200:
        raise InvalidInput("k must be between 1 and 200.")
    spec = _spec_for(tenant, pipeline, overrides)
    mode = mode or spec.mode
    if mode not in MODES:
        raise InvalidInput(f"Unknown mode {mode!r}; use one of {', '.join(MODES)}.")
    where = RetrievalFilter.for_tenant(tenant, source_ids=source_ids)
    run = _Run(tenant=tenant, spec=spec, where=where, llm=_llm_for(llm, use_llm))
    started = time.perf_counter()
    plan, results = _run_retrieval(run, query, k=k, mode=mode, history=history)
    total_ms = (time.perf_counter() - started) * 1000
    return RetrievalRun(
        pipeline=spec.name,
        spec=spec,
        plan=plan,
        results=results,
        steps=run.steps,
        usage=run.usage,
        degraded=run.degraded,
        degraded_reason="; ".join(run.reasons),
        total_ms=total_ms,
        timings_ms={name: round(ms, 2) for name, ms in {**run.timings, "total_ms": total_ms}.items()},
    )


def pipeline_answer(
    *,
    tenant,
    question: str,
    pipeline: str | PipelineSpec | None = None,
    user=None,
    k: int = 5,
    strategy: str | None = None,
    window_size: int | None = None,
    reverse_pack: bool = True,
    use_llm: bool = True,
    source_ids: list[int] | None = None,
    overrides: dict | None = None,
    llm=CONFIGURED,
    history: list[str] | None = None,
    trace: bool | None = None,
) -> AnswerRun:
    """Answer ``question`` from the tenant's documents with numbered citations, through a pipeline.

    ``k`` passages (1-20) go into the context, packed by ``strategy`` (top_n or window, default
    the pipeline's) with ``window_size`` neighbours. The answer is the LLM's (``llm``, default the
    configured one) or extractive (no LLM, ``use_llm=False``, or the LLM failed: then
    ``degraded``). A trace is saved after the answer unless ``trace`` is false (default
    ``KB_TRACING``); ``user`` is recorded on it. ``InvalidInput`` for bad arguments.
    """
    question = _question_check(question)
    if not 1 <= k <= 20:
        raise InvalidInput("k must be between 1 and 20.")
    spec = _spec_for(tenant, pipeline, overrides)
    if strategy is not None or window_size is not None:
        spec = replace(
            spec,
            strategy=_option("strategy", strategy) if strategy is not None else spec.strategy,
            window_size=_option("window_size", window_size) if window_size is not None else spec.window_size,
        )
    where = RetrievalFilter.for_tenant(tenant, source_ids=source_ids)
    run = _Run(tenant=tenant, spec=spec, where=where, llm=_llm_for(llm, use_llm))
    started = time.perf_counter()
    plan, results = _run_retrieval(run, question, k=k, mode=spec.mode, history=history)
    search_ms = (time.perf_counter() - started) * 1000

    with run.step("pack") as step:
        if spec.strategy == "window":
            passages = pack.window(tenant, results, n=k, size=spec.window_size)
        else:
            passages = pack.top_n(results, n=k)
        step.summary = {
            "strategy": spec.strategy,
            "window": spec.window_size if spec.strategy == "window" else None,
            "reverse_pack": reverse_pack,
            "passages": [{"chunk_id": p.anchor.pk, "chunks": p.chunks} for p in passages],
        }

    answer_started = time.perf_counter()
    with run.step("generate") as step:
        if not passages:
            answer = Answer(question=question, text=NOT_FOUND, mode="extractive", citations=[], found=False)
            step.summary = {"mode": "none", "reason": "no passages"}
        else:
            answer = None
            if run.llm is not None:
                try:
                    answer, step.usage = answer_generate(question, passages, llm=run.llm, reverse_pack=reverse_pack)
                    step.summary = {"mode": "llm", "model": getattr(run.llm, "name", ""), "reply": answer.text}
                except LLMError as exc:
                    run.llm_failed("generate", exc, step)
            if answer is None:
                label = DEGRADED_LABEL if run.degraded else None
                kwargs = {"label": label} if label else {}
                answer = answer_extract(question, passages, embedder=tenant.embedder, **kwargs)
                step.summary = {"mode": "extractive", **({"fallback": True} if run.degraded else {})}
        step.summary["citations"] = [c.n for c in answer.citations]
    total_ms = (time.perf_counter() - started) * 1000
    answer.timings_ms = {
        "search_ms": round(search_ms, 2),
        "answer_ms": round((time.perf_counter() - answer_started) * 1000, 2),
        "total_ms": round(total_ms, 2),
    }
    retrieval = RetrievalRun(
        pipeline=spec.name,
        spec=spec,
        plan=plan,
        results=results,
        steps=run.steps,
        usage=run.usage,
        degraded=run.degraded,
        degraded_reason="; ".join(run.reasons),
        total_ms=search_ms,
        timings_ms={name: round(ms, 2) for name, ms in run.timings.items()},
    )
    result = AnswerRun(
        answer=answer,
        retrieval=retrieval,
        steps=run.steps,
        usage=run.usage,
        degraded=run.degraded,
        degraded_reason=retrieval.degraded_reason,
        total_ms=total_ms,
    )
    if settings.KB_TRACING if trace is None else trace:
        result.trace_id = _trace_write(tenant=tenant, user=user, result=result)
    return result


def _trace_write(*, tenant, user, result: AnswerRun) -> int:
    """Save the run's trace (after the answer, one batch); its id."""
    from retrieval.tracing import trace_save

    saved = trace_save(
        tenant=tenant,
        user=user if getattr(user, "is_authenticated", False) else None,
        pipeline=result.pipeline,
        question=result.answer.question,
        answer=result.answer.text,
        steps=result.steps,
        usage=result.usage,
        degraded=result.degraded,
        error=result.degraded_reason,
        total_ms=result.total_ms,
        config=result.retrieval.spec.as_config(),
    )
    return saved.pk
