"""Pipelines: named tuples of stages, from the question to the ranked chunks or a cited answer.

A pipeline is a row of ``PIPELINES``: a tuple of stages (``retrieval.stages.base``), each taking
the run's state (``retrieval.state.RunState``) and returning it with its part done.
``pipeline_retrieve`` runs a pipeline up to the ranked chunks (search, evaluation: the answer
stages are inactive); ``pipeline_answer`` runs it to a cited answer and records a trace. Every
stage reports a ``Step`` (stage, ms, summary, error, LLM usage).

The named pipelines (seeds ``advanced-rag-querying.txt``, ``magic-of-rag-retrieval.txt``,
``superrag.txt``, ``walkingrag-multi-turn.txt``):

==========  =================================================================================
simple      hybrid search of the question (0.7 dense / 0.3 BM25), window packing (the default)
rephrase    the LLM rewrites the question into a detailed search query first
expand      OR-expansion of the lexical query: LLM synonyms, or RM3 without an LLM
hyde        the dense side searches the embedding of an LLM-written hypothetical passage
advanced    rephrase + expand + hybrid + window
superrag    the LLM grades ~50 candidates in parallel; answer from the best verified quotations
walkingrag  rounds of retrieval driven by the facts the LLM extracts and what it says is missing
adaptive    simple, escalating to superrag then walkingrag while retrieval confidence is low
==========  =================================================================================

The first five are the standard row: condense (follow-ups) -> rewrites -> retrieve -> fuse ->
signal rerankers -> themes -> pack -> generate -> score. The last three are composite stages
(``retrieval.stages.superrag``, ``retrieval.walks.stage``, ``retrieval.stages.adaptive``) that
run ranking stages of their own.

What is asked arrives as one ``retrieval.request.AnswerRequest``; ``_state_new`` checks it in the
run's ``scope`` step and puts it in the run's state, where the stages read it.

Which pipeline runs: the request's, else ``Tenant.retrieval_config["pipeline"]``, else
``KB_PIPELINE``; its settings come from the tenant's settings schema (``retrieval.schema``).
Failure never loses the answer: when an LLM stage fails, the run goes on with the stage's
LLM-free fallback (``LLMStage.fallback``: the question as it was, RM3 for expansion, the
extractive answer), stops calling the LLM for the rest of the run, and is marked ``degraded``
with the reason. After a malformed or empty reply the next stages may still call it.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import replace

from django.conf import settings

from core.errors import InvalidInput
from core.schema import tenant_settings
from knowledge.quotas import llm_quota_error, llm_quota_get
from llm import configured_llm, llm_metered
from retrieval.config import MAX_QUERY_CHARS, MODES, SearchConfig
from retrieval.filters import retrieval_filter
from retrieval.registry import registry_configured
from retrieval.request import AnswerRequest
from retrieval.runs import AnswerRun, RetrievalRun
from retrieval.schema import PIPELINE_KEY, PipelineSpec, settings_validate
from retrieval.stages.adaptive import Adaptive
from retrieval.stages.base import depth_for, stages_run
from retrieval.stages.fuse import Fuse
from retrieval.stages.generate import Generate
from retrieval.stages.pack import Pack
from retrieval.stages.rerank import Rerank
from retrieval.stages.retrieve.candidates import Retrieve
from retrieval.stages.rewrite.condense import Condense
from retrieval.stages.rewrite.expand import Expand
from retrieval.stages.rewrite.hyde import HyDE
from retrieval.stages.rewrite.rephrase import Rephrase
from retrieval.stages.score import Score
from retrieval.stages.superrag import SuperRAG
from retrieval.stages.themes import Themes
from retrieval.state import RunState
from retrieval.traces import trace_save
from retrieval.tracing import run_observed
from retrieval.types import QueryPlan, Step
from retrieval.walks.recorder import RECORDER
from retrieval.walks.stage import WalkingRAG

# ---- the registry -------------------------------------------------------------------------------
REWRITES = {"rephrase": Rephrase(), "expand": Expand(), "hyde": HyDE()}
# From the question to the ranked chunks: every pipeline's retrieval, and each composite's.
RANKING = (Condense(), Retrieve(), Fuse(), Rerank())
ANSWER = (Pack(), Generate())
SCORE = Score()


def _standard(*rewrites: str) -> tuple:
    condense, *ranking = RANKING
    return (condense, *(REWRITES[name] for name in rewrites), *ranking, Themes(), *ANSWER, SCORE)


SUPERRAG = SuperRAG(RANKING)
WALKINGRAG = WalkingRAG(RANKING)
PIPELINES: dict[str, tuple] = {
    "simple": _standard(),
    "rephrase": _standard("rephrase"),
    "expand": _standard("expand"),
    "hyde": _standard("hyde"),
    "advanced": _standard("rephrase", "expand"),
    "superrag": (SUPERRAG, SCORE),
    "walkingrag": (WALKINGRAG, SCORE),
    "adaptive": (Adaptive(ranking=RANKING, answer=ANSWER, superrag=SUPERRAG, walkingrag=WALKINGRAG), SCORE),
}
PIPELINE_NAMES = tuple(PIPELINES)
COMPOSITES = ("superrag", "walkingrag", "adaptive")
# ``llm`` argument default: the configured endpoint (``KB_LLM_MODEL``), or none.
CONFIGURED = object()


def pipeline_shape(name: str) -> tuple[str, tuple[str, ...]]:
    """``(kind, rewrites)`` of the pipeline ``name``: "standard" or the composite stage it runs,
    and the names of its rewrite stages in order."""
    stages = PIPELINES[name]
    kind = next((stage.name for stage in stages if stage.name in COMPOSITES), "standard")
    return kind, tuple(stage.name for stage in stages if stage.name in REWRITES)


def pipeline_spec(*, tenant, name: str | None = None, overrides: dict | None = None) -> PipelineSpec:
    """The pipeline to run for ``tenant``: ``name``, else the tenant's default, else ``KB_PIPELINE``.

    Settings layer as defaults < ``KB_FUSION`` < ``tenant.retrieval_config`` < ``overrides``
    (keys: ``retrieval.schema.setting_keys()``). ``InvalidInput`` naming the key for an unknown
    pipeline, an unknown key or a bad value. A spec resolved before from the same inputs is
    returned as it was (kept per process; specs are frozen), so repeated searches skip validation.
    """
    stored = tenant_settings(tenant)
    wanted = {**stored, **(overrides or {})}
    if not isinstance(wanted.get(PIPELINE_KEY, ""), str):
        raise InvalidInput("Setting 'pipeline' must be a pipeline name.")
    name = name or wanted.get(PIPELINE_KEY) or settings.KB_PIPELINE
    if name not in PIPELINE_NAMES:
        raise InvalidInput(f"Unknown pipeline {name!r}; use one of {', '.join(PIPELINE_NAMES)}.")
    key = _spec_key(name, wanted)
    spec = _specs.get(key) if key is not None else None
    if spec is None:
        spec = _spec_build(name, wanted)
        if key is not None:
            if len(_specs) >= SPECS_KEPT:
                _specs.clear()
            _specs[key] = spec
    return spec


# Resolved specs by their inputs (pipeline, KB_FUSION, the registered rerankers, the settings with
# their types), so a tenant's repeated searches skip validating its settings
# (``benchmarks/stages_latency.py --outside``). A spec is frozen and its parts are never changed in
# place, so one object serves every run.
SPECS_KEPT = 512
_specs: dict[tuple, PipelineSpec] = {}


def _spec_key(name: str, wanted: dict) -> tuple | None:
    """The cache key of a spec: ``None`` when a value is not a plain scalar (never cached)."""
    items = []
    for key, value in sorted(wanted.items()):
        if value is not None and not isinstance(value, (str, int, float, bool)):
            return None
        items.append((key, type(value).__name__, value))
    return (name, settings.KB_FUSION, registry_configured().reranker_paths, tuple(items))


def _spec_build(name: str, wanted: dict) -> PipelineSpec:
    grouped = settings_validate({"fusion": settings.KB_FUSION, **wanted})
    search = grouped.pop(SearchConfig)
    own = grouped.pop(PipelineSpec, {})
    kind, rewrites = pipeline_shape(name)
    return PipelineSpec(
        name=name,
        kind=kind,
        rewrites=rewrites,
        search=SearchConfig(**search),
        parts={part: part(**values) for part, values in grouped.items()},
        **own,
    )


def _llm_for(llm, use_llm: bool):
    if not use_llm:
        return None
    return configured_llm() if llm is CONFIGURED else llm


def _over_llm_quota(*, tenant, client):
    """The ``QuotaExceeded`` of a tenant whose LLM tokens of the last 24 hours are used up
    (``knowledge.quotas``), else ``None`` (also when unlimited or no LLM is used)."""
    quota = llm_quota_get(tenant=tenant) if client is not None else None
    return llm_quota_error(quota) if quota is not None else None


SCOPE_STEP = "scope"


def _state_new(
    request: AnswerRequest,
    *,
    started: float,
    tenant,
    user,
    spec: PipelineSpec | None,
    overrides: dict | None,
    answering: bool,
    **fields,
) -> RunState:
    """A run's ``RunState`` for ``request``, timed from ``started`` (``time.perf_counter()`` when
    the pipeline was called), with the other ``fields`` as given.

    The request is checked (``InvalidInput`` for an empty or over-long question, ``k`` outside
    1-20 for an answer or 1-200 for a search, an unknown mode, pipeline or setting), its question
    stripped and its ``k`` set (default 5 for an answer, 10 for a search); the pipeline's spec
    resolved (``spec`` when given, else the request's pipeline with ``overrides`` on the tenant's
    settings; an answer's packing from the request); the
    retrieval filter built (access rules of ``user``, the request's sources, ``as_of``, summary
    chunks: the request's ``summaries``, else the spec's ``include_summaries``).

    Its first step, ``scope``, is the time from ``started`` to here: the request checked, the
    pipeline's settings resolved, the asker's access scope read (one query for a signed-in user,
    none otherwise) and the filter built; its summary names the pipeline and the filter.
    """
    label, k_default, k_max = ("question", 5, 20) if answering else ("query", 10, 200)
    question = request.question.strip()
    if not question:
        raise InvalidInput(f"The {label} is empty.")
    if len(question) > MAX_QUERY_CHARS:
        raise InvalidInput(f"The {label} is longer than {MAX_QUERY_CHARS} characters.")
    k = k_default if request.k is None else request.k
    if not 1 <= k <= k_max:
        raise InvalidInput(f"k must be between 1 and {k_max}.")
    spec = spec or pipeline_spec(tenant=tenant, name=request.pipeline, overrides=overrides)
    pack = {"strategy": request.strategy, "window_size": request.window_size} if answering else {}
    pack = {key: value for key, value in pack.items() if value is not None}
    spec = spec.with_settings(**pack) if pack else spec
    mode = (request.mode if not answering else None) or spec.mode
    if mode not in MODES:
        raise InvalidInput(f"Unknown mode {mode!r}; use one of {', '.join(MODES)}.")
    request = replace(request, question=question, k=k)
    where = retrieval_filter(
        tenant=tenant,
        user=user,
        source_ids=request.source_ids,
        as_of=request.as_of,
        summaries=spec.include_summaries if request.summaries is None else request.summaries,
        conversation_documents=request.conversation_documents,
    )
    state = RunState(
        request=request,
        tenant=tenant,
        spec=spec,
        where=where,
        user=user,
        mode=mode,
        answering=answering,
        started=started,
        **fields,
    )
    state.step_add(
        Step(stage=SCOPE_STEP, ms=state.elapsed_ms(), summary={"pipeline": spec.name, "filter": where.summary()})
    )
    return state


@run_observed("retrieve")
def pipeline_retrieve(
    request: AnswerRequest,
    *,
    tenant,
    user=None,
    llm=CONFIGURED,
    overrides: dict | None = None,
    spec: PipelineSpec | None = None,
) -> RetrievalRun:
    """Run ``request``'s pipeline up to the ranking; its top ``k`` chunks, best first.

    ``request`` (``retrieval.request.AnswerRequest``): the question as the query, ``k`` (1-200),
    the pipeline, ``mode`` (overrides the pipeline's retrieval mode), sources, ``as_of``, the
    switches; the packing and answer fields are not used. ``user`` is who asks (access rules,
    personalization); ``llm`` an ``LLMClient`` (default: the configured one; ``None`` or the
    request's ``use_llm`` false: no LLM); ``overrides`` settings on top of the tenant's
    (``retrieval.schema.setting_keys()``); ``spec`` a resolved ``PipelineSpec`` that replaces the
    request's pipeline and the tenant's settings (a search's, an evaluation's). ``InvalidInput`` for an empty or over-long query,
    ``k`` outside 1-200, an unknown mode, pipeline or setting. LLM failures degrade (see the
    module docstring), never raise. The LLM calls count against the tenant's daily LLM tokens
    (``knowledge.quotas``, recorded as ``search``); over its limit they are refused before they
    are sent and the stages that wanted them fall back (``degraded``, the reason giving the
    figures).
    """
    started = time.perf_counter()
    state = _state_new(
        request, started=started, tenant=tenant, user=user, spec=spec, overrides=overrides, answering=False
    )
    state.llm = _llm_for(llm, state.request.use_llm)
    with llm_metered(tenant=tenant, purpose="search"):
        state = _run(state)
    return RetrievalRun.of(state, total_ms=state.elapsed_ms())


def _run(state: RunState) -> RunState:
    """Run the spec's pipeline on ``state`` from the question as asked."""
    stages = PIPELINES[state.spec.name]
    state.plan = QueryPlan.from_question(state.request.question)
    state.depth = depth_for(state, stages)
    return stages_run(state, stages)


@run_observed("answer")
def pipeline_answer(
    request: AnswerRequest,
    *,
    tenant,
    user=None,
    llm=CONFIGURED,
    overrides: dict | None = None,
    spec: PipelineSpec | None = None,
    trace: bool | None = None,
    on_event: Callable[[str, dict], None] | None = None,
    walk=None,
) -> AnswerRun:
    """Answer ``request``'s question from the tenant's documents with numbered citations.

    ``request`` (``retrieval.request.AnswerRequest``): ``k`` passages (1-20) go into the context,
    packed by its ``strategy`` and ``window_size`` (default the pipeline's); its sources,
    ``as_of``, ``history`` (a conversation's earlier questions) and switches; ``use_llm`` false
    answers extractively. The answer is the LLM's (``llm``, default the configured one) or
    extractive (no LLM, or the LLM failed: then ``degraded``). A trace is saved after the answer
    when ``trace`` is true (default ``KB_TRACING``); ``user`` is the asker (access rules, personalization) and is recorded on it. A tenant
    that used its LLM tokens of the last 24 hours (``knowledge.quotas``) is answered without the
    LLM, ``degraded`` with a reason starting ``quota_exceeded:``. ``on_event(event, data)``, when
    given, is called as the run goes: ``"step"`` after each stage (``{"stage", "ms", "summary",
    "error"?}``) and ``"token"`` for each piece of a streamed LLM answer (``{"text"}``); the LLM
    answer is then streamed. ``overrides`` and ``spec`` as in ``pipeline_retrieve``. ``walk``: the
    ``retrieval.walks.recorder.WalkRecorder`` of a steered walk (WalkingRAG). ``InvalidInput`` for
    a bad request. Every LLM call of the run counts against the tenant's daily LLM tokens, traced
    or not (recorded as ``answer`` usage).
    """
    started = time.perf_counter()
    state = _state_new(
        request,
        started=started,
        tenant=tenant,
        user=user,
        spec=spec,
        overrides=overrides,
        answering=True,
        emit=on_event,
    )
    if walk is not None:  # a steered walk's recorder, kept for the WalkingRAG stage
        state.memo[RECORDER] = walk
    client = _llm_for(llm, state.request.use_llm)
    # The tenant's LLM tokens of the day (knowledge.quotas): over the limit, no LLM for this run.
    over_quota = _over_llm_quota(tenant=tenant, client=client)
    state.llm = client if over_quota is None else None
    # Traced as the installation or the caller asks, LLM tokens limit or not: the meter records
    # every LLM call of the run (knowledge.LLMUsage), so the quota needs no trace.
    traced = bool(settings.KB_TRACING if trace is None else trace)
    if over_quota is not None:
        state.reasons.append(f"{over_quota.code}: {over_quota.message}")
    with llm_metered(tenant=tenant, purpose="answer"):
        state = _run(state)
    result = AnswerRun.of(state)
    if traced:
        result.trace_id = _trace_write(tenant=tenant, user=user, result=result)
    for finish in state.after_trace:  # e.g. a WalkingRAG walk ends once its trace is written
        finish(result.trace_id)
    return result


def _trace_write(*, tenant, user, result: AnswerRun) -> int:
    """Save the run's trace (after the answer, one batch); its id."""
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
        scores=result.scores,
        citations=[
            {
                "n": c.n,
                "chunk_id": c.passage.anchor.pk,
                "document_id": c.passage.document.pk,
                "source_id": c.passage.document.source_id,
            }
            for c in result.answer.citations
        ],
    )
    return saved.pk
