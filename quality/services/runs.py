"""Evaluation runs: a judgment list sent through a retrieval pipeline, scored and stored.

Every judged question goes through ``retrieval.pipeline.pipeline_retrieve`` (100 chunks), the
chunks become the ranking the judgments speak about, and ``quality.metrics`` scores it:

* document-level judgments (``{"document", "grade"}``) rank each document at its best chunk;
  a document stored as an exact duplicate of another (no chunks of its own) ranks with the
  document whose chunks it shares;
* chunk-level judgments (``{"document", "text", "grade"}``, RAG4p) rank chunks; a chunk is
  relevant when it contains the judgment's text (whitespace-insensitive), since chunk numbers
  depend on the splitter;
* a document's summary chunk (``Chunk.kind``) ranks its document for document-level judgments,
  like any of its chunks; for chunk-level judgments it is never the judged passage, even when it
  quotes it (an extractive summary does), so summaries are measured strictly there.

Retrieval is slow I/O (embeddings, maybe LLM calls), so no transaction is held while a run is
measured. The runs' LLM calls count against the tenant's daily LLM tokens (``llm.metering``):
over its limit a query is searched without the LLM (``degraded``, with the reason).
"""

from __future__ import annotations

import secrets
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from core.errors import InvalidInput, NotFound
from core.models import Tenant
from core.services import tenant_create
from knowledge.ingestion.splitters import get_splitter
from knowledge.models import DocumentVersion, Source
from knowledge.services import documents_ingest, source_get_or_create
from knowledge.services.embeddings import chunks_embed
from llm import llm_metered
from quality.importers import Dataset
from quality.metrics import documents_from_chunks, metrics_aggregate, query_metrics
from quality.models import EvaluationRun, Judgment, JudgmentList
from quality.services.answers import evaluation_run_answers_add
from quality.services.judgments import judgment_list_import
from retrieval.config import MAX_QUERY_CHARS, MODES, SearchConfig
from retrieval.pipeline import PIPELINE_NAMES, pipeline_retrieve, pipeline_spec
from retrieval.request import AnswerRequest
from retrieval.types import SearchResult

TOP_STORED = 10
USAGE_KEYS = ("llm_calls", "tokens_in", "tokens_out", "cost_usd")


def _squash(text: str) -> str:
    return " ".join(text.split())


def _duplicate_documents(tenant: Tenant) -> dict[int, list[str]]:
    """Version id -> external ids of documents whose current version duplicates it (no chunks)."""
    duplicates: dict[int, list[str]] = {}
    rows = (
        DocumentVersion.objects.for_tenant(tenant)
        .filter(is_current=True, duplicate_of__isnull=False)
        .values_list("duplicate_of_id", "document__external_id")
        .order_by("pk")
    )
    for original, external_id in rows:
        duplicates.setdefault(original, []).append(external_id)
    return duplicates


def _judged_ranking(
    results: list[SearchResult], relevant: list[dict], duplicates: dict[int, list[str]]
) -> tuple[list[str], dict[str, int], list[str]]:
    """(ranking of ids, grade of each relevant id, readable top ``TOP_STORED``) for one query."""
    if any("text" in entry for entry in relevant):
        needles = [(f"text:{i}", _squash(e["text"]), e["grade"]) for i, e in enumerate(relevant)]
        labels, readable = [], []
        for result in results:
            chunk = result.chunk
            if chunk.kind == "summary":  # a summary is never the judged passage, even when it quotes it
                labels.append(f"chunk:{chunk.pk}")
                readable.append(f"{chunk.version.document.external_id}#summary")
                continue
            text = _squash(chunk.text)
            labels.append(next((label for label, needle, _ in needles if needle in text), f"chunk:{chunk.pk}"))
            readable.append(f"{chunk.version.document.external_id}#{chunk.ordinal}")
        return documents_from_chunks(labels), {label: g for label, _, g in needles}, readable[:TOP_STORED]
    grades: dict[str, int] = {}
    for entry in relevant:
        grades[entry["document"]] = max(grades.get(entry["document"], 0), entry["grade"])
    ranked_ids: list[str] = []
    for result in results:
        version = result.chunk.version
        ranked_ids.append(version.document.external_id)
        ranked_ids.extend(duplicates.get(version.pk, ()))
    ranking = documents_from_chunks(ranked_ids)
    return ranking, grades, ranking[:TOP_STORED]


def pipeline_names_check(pipelines: list[str]) -> list[str]:
    """``pipelines`` without repeats, in order; ``InvalidInput`` listing the valid names for an unknown one."""
    names = list(dict.fromkeys(name.strip() for name in pipelines if name.strip()))
    unknown = [name for name in names if name not in PIPELINE_NAMES]
    if unknown or not names:
        raise InvalidInput(
            f"Unknown pipeline(s) {', '.join(map(repr, unknown)) or '(none given)'}; "
            f"use one or more of {', '.join(PIPELINE_NAMES)}.",
            code="unknown_pipeline",
        )
    return names


def evaluation_run(
    *,
    judgment_list: JudgmentList,
    pipeline: str | None = None,
    mode: str | None = None,
    overrides: dict | None = None,
    config: SearchConfig | None = None,
    k: int = 100,
    dataset: str = "",
    splitter: str = "",
    log: Callable[[str], None] | None = None,
    on_query: Callable[[int, int], None] | None = None,
) -> EvaluationRun:
    """Run every judgment of ``judgment_list`` through a retrieval pipeline and store the scores.

    ``pipeline`` (default: the tenant's, see ``pipeline_spec``) and ``overrides`` (keys of
    ``Tenant.retrieval_config``, e.g. ``{"fusion": "rrf"}``; ``config``, a ``SearchConfig``, is
    the same given as search settings) pick the configuration; ``mode`` overrides its retrieval
    mode. ``k`` chunks are retrieved per query. The run stores the aggregated metrics (means of
    ndcg@10, recall@10, recall@100, mrr@10, hit@1, precision@10; p50_ms/p95_ms of the whole
    pipeline's latency; LLM usage totals ``llm_calls``, ``tokens_in``, ``tokens_out``,
    ``cost_usd``; ``degraded`` queries; ``queries``) and per-query results. ``dataset`` defaults
    to the list's origin; ``splitter`` is recorded in ``config``. ``on_query(done, total)`` is
    called after each query. LLM calls count against the tenant's daily LLM tokens (recorded as
    ``evaluation``); over the limit the queries run without the LLM and count as ``degraded``.
    """
    if mode is not None and mode not in MODES:
        raise InvalidInput(f"Unknown mode {mode!r}; use one of {', '.join(MODES)}.")
    tenant = judgment_list.tenant
    if config is not None:
        overrides = {**config.as_dict(), **(overrides or {})}
    spec = pipeline_spec(tenant=tenant, name=pipeline, overrides=overrides)
    mode = mode or spec.mode
    judgments = list(Judgment.objects.filter(judgment_list=judgment_list).order_by("pk"))
    if not judgments:
        raise InvalidInput(f"Judgment list {judgment_list.name!r} has no judgments.")
    duplicates = _duplicate_documents(tenant)
    per_query: list[dict] = []
    for number, judgment in enumerate(judgments, start=1):
        with llm_metered(tenant=tenant, purpose="evaluation"):
            run = pipeline_retrieve(
                AnswerRequest(question=judgment.question[:MAX_QUERY_CHARS], k=k, mode=mode),
                tenant=tenant,
                spec=spec,
            )
        per_query.append(_query_result(judgment, run, duplicates))
        if on_query:
            on_query(number, len(judgments))
        if log and number % 25 == 0:
            log(f"{number}/{len(judgments)} queries")
    return EvaluationRun.objects.create(
        judgment_list=judgment_list,
        tenant=tenant,
        dataset=dataset or judgment_list.origin,
        pipeline=spec.name,
        mode=mode,
        config={**spec.as_config(), "mode": mode, "splitter": splitter, "embedder": tenant.embedder, "k": k},
        metrics=_run_metrics(per_query),
        per_query=per_query,
    )


def _query_result(judgment: Judgment, run, duplicates: dict[int, list[str]]) -> dict:
    """One query's entry of ``EvaluationRun.per_query``: its metrics against ``judgment``, latency
    and timings in ms, LLM usage, whether it ran degraded, and the top results (``run`` is the
    pipeline's ``retrieve`` result)."""
    ranking, grades, top = _judged_ranking(run.results, judgment.relevant, duplicates)
    return {
        "query_id": judgment.query_id,
        "question": judgment.question,
        "metrics": {n: round(v, 6) for n, v in query_metrics(ranking, grades).items()},
        "latency_ms": round(run.total_ms, 2),
        "timings_ms": {n: round(v, 2) for n, v in run.timings_ms.items()},
        "usage": run.usage.as_dict(),
        "degraded": bool(run.degraded),
        **({"degraded_reason": run.degraded_reason} if run.degraded else {}),
        "top": top,
    }


def _run_metrics(per_query: list[dict]) -> dict:
    """A run's ``metrics`` from its ``per_query`` entries: the means and latency percentiles of
    ``metrics_aggregate`` (4 decimals), the LLM usage totals and the count of ``degraded`` queries."""
    aggregated = metrics_aggregate([q["metrics"] for q in per_query], [q["latency_ms"] for q in per_query])
    metrics = {n: round(v, 4) if isinstance(v, float) else v for n, v in aggregated.items()}
    usage = {key: sum(q["usage"][key] for q in per_query) for key in USAGE_KEYS}
    metrics.update(usage, cost_usd=round(usage["cost_usd"], 6), degraded=sum(q["degraded"] for q in per_query))
    return metrics


# --- Whole datasets --------------------------------------------------------------------------


@contextmanager
def _dataset_tenant(
    *, dataset: Dataset, keep: bool, progress: bool, log: Callable[[str], None]
) -> Iterator[tuple[Tenant, JudgmentList]]:
    """A fresh tenant ``eval-<dataset>-<random>`` holding ``dataset``'s judgments and documents.

    Unless ``keep``, the tenant is deleted on leaving, also when something failed; runs stored
    meanwhile survive (their tenant and judgment list become NULL).
    """
    tenant = tenant_create(
        slug=f"eval-{dataset.name}-{secrets.token_hex(4)}",
        name=f"Evaluation of {dataset.name}",
    )
    try:
        judgment_list = judgment_list_import(
            tenant=tenant, name=dataset.name, origin=dataset.name, judgments=dataset.judgments
        )
        source = source_get_or_create(tenant=tenant, name=dataset.name, kind=Source.Kind.DATASET)
        log(f"Ingesting {len(dataset.documents)} documents into {tenant.slug} ({dataset.splitter} splitter)")
        report = documents_ingest(
            tenant=tenant,
            source=source,
            documents=dataset.documents,
            splitter=get_splitter(dataset.splitter),
            progress=progress,
        )
        chunks_embed(tenant_id=tenant.pk)  # embedding left to KB_EMBED_QUEUE's workers: done here, before evaluating
        counts = report.counts()
        log(
            f"{counts['created']} documents, {counts['duplicate']} duplicates, {counts['chunks']} chunks"
            f" in {report.total_seconds:.1f}s"
        )
        yield tenant, judgment_list
    finally:
        if not keep:
            tenant.delete()


def dataset_evaluate_pipelines(
    *,
    dataset: Dataset,
    pipelines: list[str],
    mode: str | None = "hybrid",
    keep: bool = False,
    progress: bool = False,
    log: Callable[[str], None] | None = None,
    answers: bool = False,
) -> list[EvaluationRun]:
    """Evaluate each of ``pipelines`` on ``dataset``, ingested once into a fresh tenant.

    Every pipeline runs the same judgment list with ``mode`` (``None``: each pipeline's own).
    With ``answers``, each run's metrics also get the means of its answers' quality scores
    (``quality.services.answers.evaluation_answers``: an answer per judged question).
    ``InvalidInput`` for an unknown pipeline or mode before anything is stored. Unless ``keep``,
    the tenant is deleted afterwards, also when something fails; the runs survive.
    """
    names = pipeline_names_check(pipelines)
    if mode is not None and mode not in MODES:
        raise InvalidInput(f"Unknown mode {mode!r}; use one of {', '.join(MODES)}.")
    log = log or (lambda message: None)
    runs: list[EvaluationRun] = []
    with _dataset_tenant(dataset=dataset, keep=keep, progress=progress, log=log) as (_tenant, judgment_list):
        for name in names:
            log(f"Running {len(dataset.judgments)} queries through {name} ({mode or 'its own mode'})")
            runs.append(
                evaluation_run(
                    judgment_list=judgment_list,
                    pipeline=name,
                    mode=mode,
                    dataset=dataset.name,
                    splitter=dataset.splitter,
                    log=log,
                )
            )
            if answers:
                evaluation_run_answers_add(run=runs[-1], judgment_list=judgment_list, log=log)
    for run in runs:
        run.refresh_from_db()  # the tenant and judgment list may be gone (SET_NULL)
    return runs


def dataset_evaluate(
    *,
    dataset: Dataset,
    mode: str = "hybrid",
    pipeline: str | None = None,
    keep: bool = False,
    progress: bool = False,
    log: Callable[[str], None] | None = None,
    answers: bool = False,
) -> EvaluationRun:
    """Evaluate retrieval on ``dataset`` in a fresh tenant ``eval-<dataset>-<random>``.

    With ``answers``, the run's metrics also get the means of its answers' quality scores
    (``quality.services.answers.evaluation_answers``).

    Imports the judgments, ingests the documents with the dataset's splitter, runs
    ``evaluation_run`` with ``pipeline`` (default: the default pipeline) and, unless ``keep``,
    deletes the tenant afterwards, also when something fails: the run survives (its tenant and
    judgment list become NULL).
    """
    if mode not in MODES:
        raise InvalidInput(f"Unknown mode {mode!r}; use one of {', '.join(MODES)}.")
    if pipeline is not None:
        pipeline_names_check([pipeline])
    log = log or (lambda message: None)
    with _dataset_tenant(dataset=dataset, keep=keep, progress=progress, log=log) as (_tenant, judgment_list):
        log(f"Running {len(dataset.judgments)} queries ({mode})")
        run = evaluation_run(
            judgment_list=judgment_list,
            pipeline=pipeline,
            mode=mode,
            dataset=dataset.name,
            splitter=dataset.splitter,
            log=log,
        )
        if answers:
            evaluation_run_answers_add(run=run, judgment_list=judgment_list, log=log)
    run.refresh_from_db()
    return run


def judgment_list_evaluate(
    *,
    tenant: Tenant,
    name: str,
    pipelines: list[str] | None = None,
    mode: str | None = None,
    answers: bool = False,
    log: Callable[[str], None] | None = None,
) -> list[EvaluationRun]:
    """Evaluate the tenant's own judgment list ``name`` in place, one run per pipeline.

    ``pipelines`` default to the tenant's (one run); ``answers`` adds the answer measures
    (``evaluation_run_answers_add``). ``NotFound`` naming the tenant's lists when ``name`` is
    not one of them; ``InvalidInput`` for an unknown pipeline or mode.
    """
    names = pipeline_names_check(pipelines) if pipelines is not None else [None]
    judgment_list = JudgmentList.objects.for_tenant(tenant).filter(name=name).first()
    if judgment_list is None:
        lists = ", ".join(JudgmentList.objects.for_tenant(tenant).order_by("name").values_list("name", flat=True))
        raise NotFound(f"Tenant {tenant.slug!r} has no judgment list {name!r}; its lists: {lists or 'none'}.")
    runs = [
        evaluation_run(judgment_list=judgment_list, pipeline=pipeline, mode=mode, dataset=judgment_list.name, log=log)
        for pipeline in names
    ]
    if answers:
        runs = [evaluation_run_answers_add(run=run, judgment_list=judgment_list, log=log) for run in runs]
    return runs
