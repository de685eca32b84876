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
(``retrieval.stages.superrag``, ``.walkingrag``, ``.adaptive``) that run ranking stages of
their own.

Which pipeline runs: the request's, else ``Tenant.retrieval_config["pipeline"]``, else
``KB_PIPELINE``; its settings come from the tenant's settings schema (``retrieval.schema``).
Failure never loses the answer: when an LLM stage fails, the run goes on with the stage's
LLM-free fallback (``LLMStage.fallback``: the question as it was, RM3 for expansion, the
extractive answer), stops calling the LLM for the rest of the run, and is marked ``degraded``
with the reason. After a malformed or empty reply the next stages may still call it.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import date

from django.conf import settings

from core.errors import InvalidInput
from knowledge.access import access_scope_get
from knowledge.attachments import attached_versions_hidden
from llm import Usage, configured_llm, llm_metered
from retrieval.config import MAX_QUERY_CHARS, MODES, SearchConfig
from retrieval.filters import RetrievalFilter
from retrieval.quotas import llm_quota_error, llm_quota_get
from retrieval.schema import PIPELINE_KEY, PipelineSpec, settings_validate
from retrieval.stages.adaptive import Adaptive
from retrieval.stages.base import depth_for, stages_run
from retrieval.stages.fuse import Fuse
from retrieval.stages.generate import Generate
from retrieval.stages.pack import Pack
from retrieval.stages.rerank import SIGNAL_RERANKERS, Rerank
from retrieval.stages.retrieve.candidates import Retrieve
from retrieval.stages.rewrite.condense import Condense
from retrieval.stages.rewrite.expand import Expand
from retrieval.stages.rewrite.hyde import HyDE
from retrieval.stages.rewrite.rephrase import Rephrase
from retrieval.stages.score import Score
from retrieval.stages.superrag import SuperRAG
from retrieval.stages.themes import Themes
from retrieval.stages.walkingrag import WalkingRAG
from retrieval.state import RunState
from retrieval.tracing import run_observed, trace_save
from retrieval.types import Answer, QueryPlan, SearchResult, Step

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
    stored = dict(tenant.retrieval_config or {}) if tenant is not None else {}
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
    return (name, settings.KB_FUSION, tuple(SIGNAL_RERANKERS), tuple(items))


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

    @classmethod
    def of(cls, run: RunState, *, total_ms: float) -> RetrievalRun:
        """The record of ``run``'s retrieval: its plan and results, spec, steps, usage and degradation so far."""
        return cls(
            pipeline=run.spec.name,
            spec=run.spec,
            plan=run.plan,
            results=run.results,
            steps=run.steps,
            usage=run.usage,
            degraded=run.degraded,
            degraded_reason="; ".join(run.reasons),
            total_ms=total_ms,
            timings_ms={name: round(ms, 2) for name, ms in {**run.timings, "total_ms": total_ms}.items()},
        )


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
    # Answer-quality scores (``retrieval.stages.score.Score``) when ``KB_SCORE_ANSWERS`` is on, else None.
    scores: dict | None = None
    escalation: dict = field(default_factory=dict)
    # Set by ``people.conversations.conversation_ask``: the conversation and the turn's number.
    conversation_id: int | None = None
    turn: int | None = None
    # The numbered passages the answer was written from (``[n]`` is ``passages[n - 1]``).
    passages: list = field(default_factory=list)
    # Set by ``people.asking``: names of the sources still syncing when the question was answered
    # (``knowledge.selectors.sources_syncing``); the answer may lack what they will bring.
    syncing: list[str] = field(default_factory=list)

    @property
    def pipeline(self) -> str:
        return self.retrieval.pipeline

    def as_dict(self) -> dict:
        """The API/CLI shape: the answer's fields plus pipeline, trace_id, degraded, steps, usage,
        scores and ``syncing`` (source names still syncing; empty when all are in)."""
        return {
            **self.answer.as_dict(),
            "pipeline": self.pipeline,
            "trace_id": self.trace_id,
            "degraded": self.degraded,
            "degraded_reason": self.degraded_reason,
            "steps": [step.as_dict() for step in self.steps],
            "usage": self.usage.as_dict(),
            "scores": self.scores,
            "syncing": self.syncing,
            **({"escalation": self.escalation} if self.escalation else {}),
            **({"conversation_id": self.conversation_id, "turn": self.turn} if self.conversation_id else {}),
        }


def _question_check(question: str, *, label: str = "question") -> str:
    question = (question or "").strip()
    if not question:
        raise InvalidInput(f"The {label} is empty.")
    if len(question) > MAX_QUERY_CHARS:
        raise InvalidInput(f"The {label} is longer than {MAX_QUERY_CHARS} characters.")
    return question


# Per-request switches: name -> default. ``personalize`` turns the personal rerank stage and the
# prompt's user layer on or off; ``collapse`` collapses near-duplicate clusters (None: the
# tenant's setting); ``summaries`` lets summary chunks compete (None: the tenant's
# ``include_summaries``).
REQUEST_OPTIONS = {"personalize": True, "collapse": None, "summaries": None}


def _options(options: dict | None) -> dict:
    unknown = sorted(set(options or {}) - set(REQUEST_OPTIONS))
    if unknown:
        raise InvalidInput(f"Unknown request option(s): {', '.join(unknown)}.")
    merged = {**REQUEST_OPTIONS, **(options or {})}
    if not isinstance(merged["personalize"], bool):
        raise InvalidInput(f"Option 'personalize' must be true or false, not {merged['personalize']!r}.")
    if merged["summaries"] is not None and not isinstance(merged["summaries"], bool):
        raise InvalidInput(f"Option 'summaries' must be true or false, not {merged['summaries']!r}.")
    return merged


def _summaries_wanted(spec: PipelineSpec, options: dict) -> bool:
    """Whether summary chunks compete: the request's ``summaries`` option, else the spec's ``include_summaries``."""
    return spec.include_summaries if options["summaries"] is None else options["summaries"]


def retrieval_filter(
    *,
    tenant,
    user=None,
    source_ids=None,
    as_of: date | None = None,
    summaries: bool = True,
    conversation_documents: Sequence[int] = (),
) -> RetrievalFilter:
    """The shared retrieval filter for ``user`` asking in ``tenant`` (sources, as-of date, access
    rules; ``summaries`` false keeps summary chunks out). Files attached to conversations are
    hidden, but ``conversation_documents`` (the files of the conversation asking:
    ``people.attachments``), for everyone, operators included (``knowledge.attachments``).

    ``user`` ``None`` applies no access rules (operators, evaluations); a user who is not a member
    of ``tenant`` gets ``PermissionDenied`` (``knowledge.access.access_scope_get``).
    """
    access = access_scope_get(tenant=tenant, user=user)
    return RetrievalFilter.for_tenant(
        tenant,
        source_ids=source_ids,
        as_of=as_of,
        access=access,
        summaries=summaries,
        conversation_documents=conversation_documents,
        hidden_versions=attached_versions_hidden(tenant=tenant, keep=conversation_documents),
    )


def _llm_for(llm, use_llm: bool):
    if not use_llm:
        return None
    return configured_llm() if llm is CONFIGURED else llm


def _llm_quota(*, tenant, client):
    """(the tenant's LLM tokens quota or ``None`` when unlimited or no LLM is used, the
    ``QuotaExceeded`` when its tokens of the last 24 hours are used up or ``None``)."""
    quota = llm_quota_get(tenant=tenant) if client is not None else None
    return quota, (llm_quota_error(quota) if quota is not None else None)


def _spec_for(tenant, pipeline, overrides) -> PipelineSpec:
    if isinstance(pipeline, PipelineSpec):
        return pipeline
    return pipeline_spec(tenant=tenant, name=pipeline, overrides=overrides)


SCOPE_STEP = "scope"


def _state_new(
    *,
    started: float,
    tenant,
    spec: PipelineSpec,
    user,
    source_ids,
    as_of,
    options: dict | None,
    conversation_documents: Sequence[int] = (),
    **fields,
) -> RunState:
    """A run's ``RunState``, timed from ``started`` (``time.perf_counter()`` when the pipeline was
    called): the request's options checked, its retrieval filter built (access rules of ``user``,
    sources, ``as_of``, summary chunks), and the other ``fields`` as given.

    Its first step, ``scope``, is the time from ``started`` to here: the arguments checked, the
    pipeline's settings resolved, the asker's access scope read (one query for a signed-in user,
    none otherwise) and the filter built; its summary names the pipeline and the filter.
    """
    options = _options(options)
    where = retrieval_filter(
        tenant=tenant,
        user=user,
        source_ids=source_ids,
        as_of=as_of,
        summaries=_summaries_wanted(spec, options),
        conversation_documents=conversation_documents,
    )
    state = RunState(tenant=tenant, spec=spec, where=where, user=user, options=options, started=started, **fields)
    state.step_add(
        Step(stage=SCOPE_STEP, ms=state.elapsed_ms(), summary={"pipeline": spec.name, "filter": where.summary()})
    )
    return state


@run_observed("retrieve")
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
    user=None,
    as_of: date | None = None,
    options: dict | None = None,
) -> RetrievalRun:
    """Run a pipeline's stages up to the ranking; the top ``k`` chunks, best first.

    ``mode`` overrides the pipeline's retrieval mode; ``source_ids`` keeps only those sources;
    ``llm`` is an ``LLMClient`` (default: the configured one; ``None`` or ``use_llm=False``: no
    LLM). ``user`` is who asks (access rules, personalization); ``as_of`` retrieves the versions
    current on that date; ``options`` are per-request switches (``REQUEST_OPTIONS``).
    ``InvalidInput`` for an empty or over-long query, ``k`` outside 1-200, an unknown mode
    or pipeline. LLM failures degrade (see the module docstring), never raise. The LLM calls
    count against the tenant's daily LLM tokens (``retrieval.quotas``, recorded as ``search``);
    over its limit they are refused before they are sent and the stages that wanted them fall
    back (``degraded``, the reason giving the figures).
    """
    started = time.perf_counter()
    query = _question_check(query, label="query")
    if not 1 <= k <= 200:
        raise InvalidInput("k must be between 1 and 200.")
    spec = _spec_for(tenant, pipeline, overrides)
    mode = mode or spec.mode
    if mode not in MODES:
        raise InvalidInput(f"Unknown mode {mode!r}; use one of {', '.join(MODES)}.")
    state = _state_new(
        started=started,
        tenant=tenant,
        spec=spec,
        user=user,
        source_ids=source_ids,
        as_of=as_of,
        options=options,
        llm=_llm_for(llm, use_llm),
        question=query,
        history=history,
        k=k,
        mode=mode,
    )
    with llm_metered(tenant=tenant, purpose="search"):
        state = _run(state)
    return RetrievalRun.of(state, total_ms=state.elapsed_ms())


def _run(state: RunState) -> RunState:
    """Run the spec's pipeline on ``state`` from the question as asked."""
    stages = PIPELINES[state.spec.name]
    state.plan = QueryPlan.from_question(state.question)
    state.depth = depth_for(state, stages)
    return stages_run(state, stages)


@run_observed("answer")
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
    on_event: Callable[[str, dict], None] | None = None,
    as_of: date | None = None,
    options: dict | None = None,
    walk=None,
    conversation_documents: Sequence[int] = (),
) -> AnswerRun:
    """Answer ``question`` from the tenant's documents with numbered citations, through a pipeline.

    ``k`` passages (1-20) go into the context, packed by ``strategy`` (top_n or window, default
    the pipeline's) with ``window_size`` neighbours. The answer is the LLM's (``llm``, default the
    configured one) or extractive (no LLM, ``use_llm=False``, or the LLM failed: then
    ``degraded``). A trace is saved after the answer unless ``trace`` is false (default
    ``KB_TRACING``, and always for a tenant with an LLM tokens limit); ``user`` is recorded on
    it. A tenant that used its LLM tokens of the last 24 hours (``retrieval.quotas``) is answered
    without the LLM, ``degraded`` with a reason starting ``quota_exceeded:``.
    ``on_event(event, data)``, when given, is called as the run goes: ``"step"`` after each stage
    (``{"stage", "ms", "summary", "error"?}``) and ``"token"`` for each piece of a streamed LLM
    answer (``{"text"}``); the LLM answer is then streamed. ``as_of`` and ``options`` as in ``pipeline_retrieve``. ``walk``: the
    ``retrieval.walks.recorder.WalkRecorder`` of a steered walk (WalkingRAG).
    ``conversation_documents``: the files attached to the conversation asking, searched with the
    tenant's documents (every other attached file stays hidden). ``InvalidInput`` for bad
    arguments. Every LLM call of the run counts against the tenant's daily LLM tokens, traced or
    not (``trace=False``, e.g. evaluations: recorded as ``answer`` usage instead of on a trace).
    """
    started = time.perf_counter()
    question = _question_check(question)
    if not 1 <= k <= 20:
        raise InvalidInput("k must be between 1 and 20.")
    spec = _spec_for(tenant, pipeline, overrides)
    pack = {"strategy": strategy, "window_size": window_size}
    if any(value is not None for value in pack.values()):
        spec = spec.with_settings(**{key: value for key, value in pack.items() if value is not None})
    client = _llm_for(llm, use_llm)
    # The tenant's LLM tokens of the day (retrieval.quotas): over the limit, no LLM for this run.
    quota, over_quota = _llm_quota(tenant=tenant, client=client)
    if over_quota is not None:
        client = None
    # A tenant with an LLM tokens limit is always traced, unless the caller wants no trace: its
    # traces are the meter of its answers; an untraced run's calls are recorded one by one.
    traced = bool(settings.KB_TRACING if trace is None else trace) or (quota is not None and trace is not False)
    state = _state_new(
        started=started,
        tenant=tenant,
        spec=spec,
        user=user,
        source_ids=source_ids,
        as_of=as_of,
        options=options,
        llm=client,
        emit=on_event,
        question=question,
        history=history,
        k=k,
        mode=spec.mode,
        answering=True,
        reverse_pack=reverse_pack,
        walk=walk,
        conversation_documents=conversation_documents,
    )
    if over_quota is not None:
        state.reasons.append(f"{over_quota.code}: {over_quota.message}")
    with llm_metered(tenant=tenant, purpose="answer", record=not traced):
        state = _run(state)
    answer, search_ms = state.answer, state.search_ms
    total_ms = state.elapsed_ms()
    answer.timings_ms = {
        "search_ms": round(search_ms, 2),
        "answer_ms": round(total_ms - search_ms, 2),
        "total_ms": round(total_ms, 2),
    }
    retrieval = RetrievalRun.of(state, total_ms=search_ms)
    result = AnswerRun(
        answer=answer,
        retrieval=retrieval,
        steps=state.steps,
        usage=state.usage,
        degraded=state.degraded,
        degraded_reason=retrieval.degraded_reason,
        total_ms=total_ms,
        escalation=state.escalation,
        scores=state.scores,
        passages=list(state.passages or []),
    )
    if traced:
        result.trace_id = _trace_write(tenant=tenant, user=user, result=result)
    if state.walk is not None:  # a WalkingRAG walk ends once its trace is written
        state.walk.finish(trace_id=result.trace_id)
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
