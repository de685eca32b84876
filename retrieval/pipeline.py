"""Named pipelines of typed stages: rewrite -> retrieve -> fuse -> pack -> generate, traced.

A pipeline is a ``PipelineSpec``: which rewrite stages run (``rephrase``, ``expand``, ``hyde``),
the retrieval mode, the search settings and the packing strategy. ``pipeline_retrieve`` runs it
up to the ranked chunks (search, evaluation); ``pipeline_answer`` runs it to a cited answer and
records a trace. Every stage reports a ``Step`` (stage, ms, summary, error, LLM usage).

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

The standard pipelines share one flow; the last three have flows of their own
(``retrieval.flows``).

Which pipeline runs: the request's, else ``Tenant.retrieval_config["pipeline"]``, else
``KB_PIPELINE``. Failure never loses the answer: when an LLM stage fails, the run goes on with
the stage's LLM-free counterpart (the question as it was, RM3 for expansion, the extractive
answer), stops calling the LLM for the rest of the run, and is marked ``degraded`` with the
reason. After a malformed or empty reply the next stages may still call it.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, fields, replace
from datetime import date

from django.conf import settings

from core.errors import InvalidInput
from knowledge.access import access_scope_get
from llm import Usage, configured_llm
from retrieval.config import MAX_QUERY_CHARS, MODES, SearchConfig
from retrieval.flows import KINDS, flow_for, ranking_for
from retrieval.run import RunContext
from retrieval.stages import pack
from retrieval.stages.retrieve.filters import RetrievalFilter
from retrieval.stages.score import score_stage
from retrieval.types import Answer, QueryPlan, SearchResult, Step

# name -> (flow kind, rewrite stages). A flow kind is how retrieval and generation are wired
# (``retrieval.flows``); rewrite stages run first in every kind.
PIPELINES = {
    "simple": ("standard", ()),
    "rephrase": ("standard", ("rephrase",)),
    "expand": ("standard", ("expand",)),
    "hyde": ("standard", ("hyde",)),
    "advanced": ("standard", ("rephrase", "expand")),
    "superrag": ("superrag", ()),
    "walkingrag": ("walkingrag", ()),
    "adaptive": ("adaptive", ()),
}
PIPELINE_NAMES = tuple(PIPELINES)
REWRITES = {name: rewrites for name, (_kind, rewrites) in PIPELINES.items()}
EXPANSIONS = ("auto", "llm", "rm3")
# ``llm`` argument default: the configured endpoint (``KB_LLM_MODEL``), or none.
CONFIGURED = object()


@dataclass(frozen=True)
class PipelineSpec:
    """A pipeline's full configuration. ``as_config()`` is what runs and traces record.

    ``kind`` names the flow (``retrieval.flows.KINDS``); ``rewrites`` run in order; ``mode`` is hybrid, lexical or dense; ``strategy`` (top_n or
    window) and ``window_size`` shape the answer's context; ``expansion`` is auto (LLM when one
    is configured, else RM3), llm or rm3; ``rm3_*`` are RM3's parameters (Anserini defaults);
    ``llm_expansion_weight`` weighs LLM-added terms; ``hyde_mix`` is the HyDE passage's share of
    the dense query vector.
    """

    name: str = "simple"
    kind: str = "standard"
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
    # SuperRAG (seed superrag.txt): candidates the LLM scores, passages kept, confidence floor.
    superrag_candidates: int = 50
    superrag_keep: int = 5
    superrag_threshold: float = 0.5
    # WalkingRAG (seed walkingrag-multi-turn.txt): rounds at most.
    walk_max_rounds: int = 3
    # Adaptive: escalate below this confidence (retrieval.stages.confidence, calibrated on the dev sets).
    adaptive_threshold: float = 0.8
    # ---- near-duplicates (issue 8 §1) ----
    # Collapse a near-duplicate cluster to its freshest member (a request's ``collapse`` overrides);
    # the Jaccard threshold of the ingestion-side search (None: KB_NEAR_DUPLICATE_THRESHOLD).
    collapse_near_duplicates: bool = True
    near_duplicate_threshold: float | None = None
    # ---- recency and quality (issue 8 §3) ----
    # retrieval.stages.rerank.recency: fused score x recency factor x reliability^quality_weight;
    # the factor decays with the source's half-life (else ``recency_half_life_days``, 0 = none)
    # from ``published_at`` (``recency_undated``: neutral, or the ingestion time) down to
    # ``recency_floor``; candidates below ``recency_threshold`` x the top fused score are dropped.
    recency: str = "on"
    recency_floor: float = 0.5
    recency_half_life_days: float = 0.0
    recency_undated: str = "neutral"
    recency_threshold: float = 0.0
    quality_weight: float = 1.0
    # Source feedback: the quality factor also x (1 - weight x the source's excess negative share of
    # citation feedback over the tenant's); 0 = off (unmeasured: the dev sets have no feedback).
    source_feedback_weight: float = 0.0
    # ---- diversity (issue 8 §4) ----
    # retrieval.stages.rerank.diversity: off, caps (at most ``diversity_per_document`` chunks per
    # document and ``diversity_per_source`` per source in the top k; 0 = no cap) or mmr (MMR over
    # the chunk embeddings with ``mmr_lambda``).
    diversity: str = "off"
    diversity_per_document: int = 2
    diversity_per_source: int = 0
    mmr_lambda: float = 0.7
    # ---- volume: themes (issue 8 §5) ----
    # themes "on": of the best ``themes_pool`` candidates, those scoring at least
    # ``themes_threshold`` x the best are grouped into themes (cosine ``themes_distance``), and the
    # best chunk of each theme is packed first (``retrieval.stages.themes``; standard flow).
    themes: str = "off"
    themes_pool: int = 30
    themes_threshold: float = 0.6
    themes_distance: float = 0.5

    # ---- personalization (issue 9 §2) ----
    # The ``personal`` reranker (people.rerank, docs/personalization.md): factor
    # 1 + boost (preferred source) + useful_boost x usefulness, within 1 +- cap; a muted source's
    # results x (1 - mute); only results within ``band`` of the top score are reordered.
    personal_boost: float = 0.2
    personal_useful_boost: float = 0.2
    personal_cap: float = 0.2
    personal_mute: float = 0.2
    personal_band: float = 0.15
    # ---- enrichment (issue 8 §6) ----
    # Enrich the tenant's chunks after ingestion (None: KB_ENRICHMENT); knowledge.enrichment.
    # The field's weight in retrieval is the search setting ``enrichment_weight``.
    enrichment: bool | None = None
    # ---- per-document summaries (issue 8 §5) ----
    # ``summaries``: how they are written at ingestion (knowledge.summaries; None: KB_SUMMARIES);
    # ``include_summaries``: whether summary chunks compete in retrieval (a request's
    # ``summaries`` option overrides it).
    summaries: str | None = None
    include_summaries: bool = True
    # ----
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
    "superrag_candidates": (1, 200),
    "superrag_keep": (1, 20),
    "superrag_threshold": (0.0, 1.0),
    "walk_max_rounds": (1, 10),
    "adaptive_threshold": (0.0, 1.0),
    # ---- near-duplicates (issue 8 §1) ----
    "collapse_near_duplicates": bool,
    "near_duplicate_threshold": (0.5, 1.0),
    # ---- recency and quality (issue 8 §3) ----
    "recency": ("on", "off"),
    "recency_floor": (0.0, 1.0),
    "recency_half_life_days": (0.0, 36500.0),
    "recency_undated": ("neutral", "ingested"),
    "recency_threshold": (0.0, 1.0),
    "quality_weight": (0.0, 1.0),
    "source_feedback_weight": (0.0, 1.0),
    # ---- diversity (issue 8 §4) ----
    "diversity": ("off", "caps", "mmr"),
    "diversity_per_document": (0, 50),
    "diversity_per_source": (0, 50),
    "mmr_lambda": (0.0, 1.0),
    # ---- volume: themes (issue 8 §5) ----
    "themes": ("off", "on"),
    "themes_pool": (5, 100),
    "themes_threshold": (0.0, 1.0),
    "themes_distance": (0.05, 2.0),
    # ---- personalization (issue 9 §2) ----
    "personal_boost": (0.0, 1.0),
    "personal_useful_boost": (0.0, 1.0),
    "personal_cap": (0.0, 1.0),
    "personal_mute": (0.0, 1.0),
    "personal_band": (0.0, 1.0),
    # ---- enrichment (issue 8 §6) ----
    "enrichment": bool,
    # ---- per-document summaries (issue 8 §5) ----
    "summaries": ("off", "auto", "extractive", "llm"),
    "include_summaries": bool,
    # ----
}
SETTING_KEYS = ("pipeline", *_OPTION_RULES, *(f.name for f in fields(SearchConfig)))


def _option(name: str, value):
    rule = _OPTION_RULES[name]
    if rule is bool:  # a switch: true or false only
        if not isinstance(value, bool):
            raise InvalidInput(f"Setting {name!r} must be true or false, not {value!r}.")
        return value
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
    kind, rewrites = PIPELINES[name]
    assert kind in KINDS, kind
    return PipelineSpec(name=name, kind=kind, rewrites=rewrites, search=search, **options)


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
    def of(cls, run: RunContext, *, plan: QueryPlan, results: list[SearchResult], total_ms: float) -> RetrievalRun:
        """The record of ``run``'s retrieval: its spec, steps, usage and degradation so far."""
        return cls(
            pipeline=run.spec.name,
            spec=run.spec,
            plan=plan,
            results=results,
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
    # Answer-quality scores (``retrieval.stages.score``) when ``KB_SCORE_ANSWERS`` is on, else None.
    scores: dict | None = None
    escalation: dict = field(default_factory=dict)
    # Set by ``people.conversations.conversation_ask``: the conversation and the turn's number.
    conversation_id: int | None = None
    turn: int | None = None

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
            "scores": self.scores,
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


# Per-request switches: name -> default. ``personalize`` (issue 9 §2) turns the personal rerank
# stage and the prompt's user layer on or off; ``collapse`` (issue 8 §1) collapses near-duplicate
# clusters (None: the tenant's setting); ``summaries`` (issue 8 §5) lets summary chunks compete
# (None: the tenant's ``include_summaries``).
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
    *, tenant, user=None, source_ids=None, as_of: date | None = None, summaries: bool = True
) -> RetrievalFilter:
    """The shared retrieval filter for ``user`` asking in ``tenant`` (sources, as-of date, access
    rules; ``summaries`` false keeps summary chunks out).

    ``user`` ``None`` applies no access rules (operators, evaluations); a user who is not a member
    of ``tenant`` gets ``PermissionDenied`` (``knowledge.access.access_scope_get``).
    """
    access = access_scope_get(tenant=tenant, user=user)
    return RetrievalFilter.for_tenant(tenant, source_ids=source_ids, as_of=as_of, access=access, summaries=summaries)


def _llm_for(llm, use_llm: bool):
    if not use_llm:
        return None
    return configured_llm() if llm is CONFIGURED else llm


def _spec_for(tenant, pipeline, overrides) -> PipelineSpec:
    if isinstance(pipeline, PipelineSpec):
        return pipeline
    return pipeline_spec(tenant=tenant, name=pipeline, overrides=overrides)


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
    """Run a pipeline's rewrite, retrieve and fuse stages; the top ``k`` chunks, best first.

    ``mode`` overrides the pipeline's retrieval mode; ``source_ids`` keeps only those sources;
    ``llm`` is an ``LLMClient`` (default: the configured one; ``None`` or ``use_llm=False``: no
    LLM). ``user`` is who asks (access rules, personalization); ``as_of`` retrieves the versions
    current on that date; ``options`` are per-request switches (``REQUEST_OPTIONS``).
    ``InvalidInput`` for an empty or over-long query, ``k`` outside 1-200, an unknown mode
    or pipeline. LLM failures degrade (see the module docstring), never raise.
    """
    query = _question_check(query, label="query")
    if not 1 <= k <= 200:
        raise InvalidInput("k must be between 1 and 200.")
    spec = _spec_for(tenant, pipeline, overrides)
    mode = mode or spec.mode
    if mode not in MODES:
        raise InvalidInput(f"Unknown mode {mode!r}; use one of {', '.join(MODES)}.")
    options = _options(options)
    where = retrieval_filter(
        tenant=tenant, user=user, source_ids=source_ids, as_of=as_of, summaries=_summaries_wanted(spec, options)
    )
    run = RunContext(tenant=tenant, spec=spec, where=where, llm=_llm_for(llm, use_llm), user=user, options=options)
    started = time.perf_counter()
    plan, results = ranking_for(spec.kind)(run, query, k=k, mode=mode, history=history)
    total_ms = (time.perf_counter() - started) * 1000
    return RetrievalRun.of(run, plan=plan, results=results, total_ms=total_ms)


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
) -> AnswerRun:
    """Answer ``question`` from the tenant's documents with numbered citations, through a pipeline.

    ``k`` passages (1-20) go into the context, packed by ``strategy`` (top_n or window, default
    the pipeline's) with ``window_size`` neighbours. The answer is the LLM's (``llm``, default the
    configured one) or extractive (no LLM, ``use_llm=False``, or the LLM failed: then
    ``degraded``). A trace is saved after the answer unless ``trace`` is false (default
    ``KB_TRACING``); ``user`` is recorded on it. ``on_event(event, data)``, when given, is called
    as the run goes: ``"step"`` after each stage (``{"stage", "ms", "summary", "error"?}``) and
    ``"token"`` for each piece of a streamed LLM answer (``{"text"}``); the LLM answer is then
    streamed. ``as_of`` and ``options`` as in ``pipeline_retrieve``. ``InvalidInput`` for bad
    arguments.
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
    options = _options(options)
    where = retrieval_filter(
        tenant=tenant, user=user, source_ids=source_ids, as_of=as_of, summaries=_summaries_wanted(spec, options)
    )
    run = RunContext(
        tenant=tenant,
        spec=spec,
        where=where,
        llm=_llm_for(llm, use_llm),
        emit=on_event,
        user=user,
        options=options,
    )
    started = time.perf_counter()
    flow = flow_for(spec.kind)(run, question, k=k, reverse_pack=reverse_pack, history=history)
    plan, results, answer = flow.plan, flow.results, flow.answer
    search_ms = flow.search_ms
    answer_started = started + search_ms / 1000
    total_ms = (time.perf_counter() - started) * 1000
    answer.timings_ms = {
        "search_ms": round(search_ms, 2),
        "answer_ms": round((time.perf_counter() - answer_started) * 1000, 2),
        "total_ms": round(total_ms, 2),
    }
    retrieval = RetrievalRun.of(run, plan=plan, results=results, total_ms=search_ms)
    result = AnswerRun(
        answer=answer,
        retrieval=retrieval,
        steps=run.steps,
        usage=run.usage,
        degraded=run.degraded,
        degraded_reason=retrieval.degraded_reason,
        total_ms=total_ms,
        escalation=flow.escalation,
    )
    if settings.KB_SCORE_ANSWERS:
        result.scores = score_stage(run, answer)
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
