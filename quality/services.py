"""Writes of the quality app: judgment lists, evaluation runs, and whole-dataset evaluations.

An evaluation sends every judged question through ``retrieval.search.chunk_search`` (100
chunks), turns the chunks into the ranking the judgments speak about, and scores it with
``quality.metrics``:

* document-level judgments (``{"document", "grade"}``) rank each document at its best chunk;
  a document stored as an exact duplicate of another (no chunks of its own) ranks with the
  document whose chunks it shares;
* chunk-level judgments (``{"document", "text", "grade"}``, RAG4p) rank chunks; a chunk is
  relevant when it contains the judgment's text (whitespace-insensitive), since chunk numbers
  depend on the splitter.

Searching is slow I/O, so no transaction is held while a run is measured.
"""

from __future__ import annotations

import logging
import secrets
from collections.abc import Callable, Iterable
from dataclasses import asdict

from django.db import IntegrityError, transaction

from knowledge.errors import InvalidInput
from knowledge.ingestion.splitters import get_splitter
from knowledge.models import DocumentVersion, Source, Tenant
from knowledge.services import documents_ingest, source_get_or_create, tenant_create
from quality.importers import Dataset, JudgedQuery
from quality.metrics import documents_from_chunks, metrics_aggregate, query_metrics
from quality.models import EvaluationRun, Judgment, JudgmentList
from retrieval.search import MAX_QUERY_CHARS, MODES, SearchConfig, SearchResult, chunk_search

logger = logging.getLogger(__name__)

TOP_STORED = 10


# --- Judgment lists --------------------------------------------------------------------------


def _relevant_clean(relevant, *, query_id: str) -> list[dict]:
    """Validate one judgment's ``relevant`` list; return it with grades filled in (default 1)."""
    if not isinstance(relevant, list) or not relevant:
        raise InvalidInput(f"Judgment {query_id!r}: 'relevant' must be a non-empty list.")
    cleaned = []
    for entry in relevant:
        if not isinstance(entry, dict) or not isinstance(entry.get("document"), str) or not entry["document"]:
            raise InvalidInput(f"Judgment {query_id!r}: every relevant entry needs a 'document' id.")
        grade = entry.get("grade", 1)
        if not isinstance(grade, int) or isinstance(grade, bool) or grade < 0:
            raise InvalidInput(f"Judgment {query_id!r}: 'grade' must be a non-negative integer.")
        item = {"document": entry["document"], "grade": grade}
        if "text" in entry:
            if not isinstance(entry["text"], str) or not entry["text"].strip():
                raise InvalidInput(f"Judgment {query_id!r}: 'text' must be a non-empty string.")
            item["text"] = entry["text"]
        cleaned.append(item)
    if len({"text" in item for item in cleaned}) > 1:
        raise InvalidInput(f"Judgment {query_id!r}: mixes chunk-level (text) and document-level entries.")
    return cleaned


def judgment_list_import(
    *,
    tenant: Tenant,
    name: str,
    origin: str,
    judgments: Iterable[JudgedQuery | tuple[str, str, list[dict]]],
) -> JudgmentList:
    """Create the tenant's judgment list ``name`` with ``judgments`` (query_id, question, relevant).

    Everything is validated first; ``InvalidInput`` (and nothing stored) for a taken name, an
    unknown origin, an empty list, a repeated query id or a malformed ``relevant`` list.
    """
    if not name.strip():
        raise InvalidInput("A judgment list needs a name.")
    if origin not in JudgmentList.Origin.values:
        raise InvalidInput(f"Unknown origin {origin!r}; use one of {', '.join(JudgmentList.Origin.values)}.")
    rows: list[Judgment] = []
    seen: set[str] = set()
    for query_id, question, relevant in judgments:
        query_id = str(query_id)
        if query_id in seen:
            raise InvalidInput(f"Two judgments share the query id {query_id!r}.")
        seen.add(query_id)
        if not isinstance(question, str) or not question.strip():
            raise InvalidInput(f"Judgment {query_id!r} has no question.")
        rows.append(
            Judgment(
                query_id=query_id,
                question=question.strip(),
                relevant=_relevant_clean(relevant, query_id=query_id),
            )
        )
    if not rows:
        raise InvalidInput("A judgment list needs at least one judgment.")
    try:
        with transaction.atomic():
            judgment_list = JudgmentList.objects.create(tenant=tenant, name=name, origin=origin)
            for row in rows:
                row.judgment_list = judgment_list
            Judgment.objects.bulk_create(rows, batch_size=500)
    except IntegrityError as exc:
        raise InvalidInput(
            f"Tenant {tenant.slug!r} already has a judgment list {name!r}.",
            code="judgment_list_exists",
        ) from exc
    return judgment_list


# --- Evaluation ------------------------------------------------------------------------------


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


def evaluation_run(
    *,
    judgment_list: JudgmentList,
    mode: str = "hybrid",
    config: SearchConfig | None = None,
    k: int = 100,
    dataset: str = "",
    splitter: str = "",
    log: Callable[[str], None] | None = None,
) -> EvaluationRun:
    """Run every judgment of ``judgment_list`` through ``chunk_search`` and store the scores.

    ``config`` defaults to the tenant's ``SearchConfig``; ``k`` chunks are retrieved per query.
    The run stores the aggregated metrics (means of ndcg@10, recall@10, recall@100, mrr@10,
    hit@1, precision@10; p50_ms/p95_ms of the search latency; queries) and per-query results.
    ``dataset`` defaults to the list's origin; ``splitter`` is recorded in ``config``.
    """
    if mode not in MODES:
        raise InvalidInput(f"Unknown mode {mode!r}; use one of {', '.join(MODES)}.")
    tenant = judgment_list.tenant
    config = config or SearchConfig.for_tenant(tenant)
    judgments = list(Judgment.objects.filter(judgment_list=judgment_list).order_by("pk"))
    if not judgments:
        raise InvalidInput(f"Judgment list {judgment_list.name!r} has no judgments.")
    duplicates = _duplicate_documents(tenant)
    per_query: list[dict] = []
    latencies: list[float] = []
    for number, judgment in enumerate(judgments, start=1):
        response = chunk_search(
            tenant=tenant,
            query=judgment.question[:MAX_QUERY_CHARS],
            k=k,
            mode=mode,
            config=config,
        )
        ranking, grades, top = _judged_ranking(response.results, judgment.relevant, duplicates)
        latency = response.timings_ms["total_ms"]
        latencies.append(latency)
        per_query.append(
            {
                "query_id": judgment.query_id,
                "question": judgment.question,
                "metrics": {n: round(v, 6) for n, v in query_metrics(ranking, grades).items()},
                "latency_ms": latency,
                "timings_ms": response.timings_ms,
                "top": top,
            }
        )
        if log and number % 25 == 0:
            log(f"{number}/{len(judgments)} queries")
    aggregated = metrics_aggregate([q["metrics"] for q in per_query], latencies)
    return EvaluationRun.objects.create(
        judgment_list=judgment_list,
        tenant=tenant,
        dataset=dataset or judgment_list.origin,
        mode=mode,
        config={**asdict(config), "splitter": splitter, "embedder": tenant.embedder, "k": k},
        metrics={n: round(v, 4) if isinstance(v, float) else v for n, v in aggregated.items()},
        per_query=per_query,
    )


def evaluation_compare(*, run_a: EvaluationRun, run_b: EvaluationRun, metric: str = "ndcg@10") -> dict:
    """How ``run_b`` differs from ``run_a``: metric deltas (b - a) and per-query changes.

    Returns ``{"metric", "metrics": {name: {"a", "b", "delta"}}, "better": [...], "worse":
    [...], "unchanged": n, "only_a": n, "only_b": n}``; ``better``/``worse`` list the queries both
    runs share whose ``metric`` rose/fell in ``run_b``, largest change first, each as
    ``{"query_id", "question", "a", "b", "delta", "top_a", "top_b"}``.
    """
    names = [n for n in run_a.metrics if n in run_b.metrics]
    metrics = {
        n: {"a": run_a.metrics[n], "b": run_b.metrics[n], "delta": round(run_b.metrics[n] - run_a.metrics[n], 4)}
        for n in names
        if isinstance(run_a.metrics[n], (int, float)) and isinstance(run_b.metrics[n], (int, float))
    }
    queries_a = {q["query_id"]: q for q in run_a.per_query}
    queries_b = {q["query_id"]: q for q in run_b.per_query}
    better, worse, unchanged = [], [], 0
    for query_id, qa in queries_a.items():
        qb = queries_b.get(query_id)
        if qb is None:
            continue
        a, b = qa["metrics"].get(metric, 0.0), qb["metrics"].get(metric, 0.0)
        if a == b:
            unchanged += 1
            continue
        row = {
            "query_id": query_id,
            "question": qa["question"],
            "a": a,
            "b": b,
            "delta": round(b - a, 4),
            "top_a": qa.get("top", [])[:3],
            "top_b": qb.get("top", [])[:3],
        }
        (better if b > a else worse).append(row)
    better.sort(key=lambda r: -r["delta"])
    worse.sort(key=lambda r: r["delta"])
    return {
        "metric": metric,
        "metrics": metrics,
        "better": better,
        "worse": worse,
        "unchanged": unchanged,
        "only_a": len(queries_a.keys() - queries_b.keys()),
        "only_b": len(queries_b.keys() - queries_a.keys()),
    }


# --- Whole datasets --------------------------------------------------------------------------


def dataset_evaluate(
    *,
    dataset: Dataset,
    mode: str = "hybrid",
    keep: bool = False,
    progress: bool = False,
    log: Callable[[str], None] | None = None,
) -> EvaluationRun:
    """Evaluate retrieval on ``dataset`` in a fresh tenant ``eval-<dataset>-<random>``.

    Imports the judgments, ingests the documents with the dataset's splitter, runs
    ``evaluation_run`` and, unless ``keep``, deletes the tenant afterwards, also when something
    fails: the run survives (its tenant and judgment list become NULL).
    """
    if mode not in MODES:
        raise InvalidInput(f"Unknown mode {mode!r}; use one of {', '.join(MODES)}.")
    log = log or (lambda message: None)
    tenant = tenant_create(
        slug=f"eval-{dataset.name}-{secrets.token_hex(4)}",
        name=f"Evaluation of {dataset.name}",
    )
    run: EvaluationRun | None = None
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
        counts = report.counts()
        log(
            f"{counts['created']} documents, {counts['duplicate']} duplicates, {counts['chunks']} chunks"
            f" in {report.total_seconds:.1f}s; running {len(dataset.judgments)} queries ({mode})"
        )
        run = evaluation_run(
            judgment_list=judgment_list, mode=mode, dataset=dataset.name, splitter=dataset.splitter, log=log
        )
    finally:
        if not keep:
            tenant.delete()
    run.refresh_from_db()  # the tenant and judgment list may be gone (SET_NULL)
    return run
