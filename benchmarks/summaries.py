"""Per-document summaries: retrieval quality with extractive summaries on vs off, and
their ingestion cost.

Usage: python benchmarks/summaries.py [--datasets bioasq hotpotqa rag4p] [--modes hybrid]
       [--throughput-docs 300] [--rounds 2] [--keep]
Writes benchmarks/results/summaries.json and prints it.

Quality. Each dataset is ingested into a tenant ``bench-summaries-<dataset>`` (summaries off,
the dataset's splitter, as ``benchmarks/retrieval_quality.py`` does); any summaries left by a
kept tenant are deleted first. Then, for each mode, the judgment list is evaluated (k = 100) with
no summaries ("off"), the extractive summaries are written (``summaries_refresh``), and it is
evaluated again ("on"), and once more with summaries kept out by the switch ("on_excluded": the
same chunks as "off" but BM25 statistics that count the summaries). Evaluation ranks a summary
as its document for document-level judgments (BioASQ, HotpotQA) and never as the judged passage
for RAG4p's chunk-level ones (``quality.services.runs``), so RAG4p's hit@1 is strict.

Breadth. On questions with at least ``--broad`` relevant documents (BioASQ's list-like
questions), the top 5 chunks (an answer's context): distinct documents and context recall@5.

Decision. Summaries may be on by default only if no dataset loses more than 0.005 of nDCG@10,
recall@10 or hit@1 in the default mode (``decision``).

Cost. ``--throughput-docs`` BioASQ documents are ingested into fresh tenants with summaries off
and on (ingestion, then the summary task's work, as a worker would run it), interleaved for
``--rounds`` rounds: documents per second of each, and their ratio. The machine is shared, so
only the ratio means something.
"""

import argparse
import json
import statistics
import time
from pathlib import Path

from _setup import ROOT, django_setup
from _toolkit import log, tenant_for
from retrieval_quality import DATASETS

METRICS = ("ndcg@10", "recall@10", "hit@1", "mrr@10", "recall@100")
DECIDING = ("ndcg@10", "recall@10", "hit@1")
TOLERANCE = 0.005


def tenant_without_summaries(dataset, *, name: str):
    """The benchmark tenant with the dataset ingested (summaries off) and its judgment list, without summaries."""
    from knowledge.models import Chunk

    tenant, judgment_list, _ = tenant_for(
        dataset, name=name, slug=f"bench-summaries-{name}", retrieval_config={"summaries": "off"}
    )
    Chunk.objects.for_tenant(tenant).filter(kind=Chunk.Kind.SUMMARY).delete()
    return tenant, judgment_list


def breadth(tenant, dataset, *, minimum: int, include: bool, k: int = 5) -> dict:
    """Distinct documents and context recall@k in the top ``k`` chunks of the broad questions."""
    from retrieval.pipeline import pipeline_retrieve
    from retrieval.request import AnswerRequest

    distinct, recalls = [], []
    for judged in dataset.judgments:
        relevant = {entry["document"] for entry in judged.relevant if "document" in entry}
        if len(relevant) < minimum or any("text" in entry for entry in judged.relevant):
            continue
        run = pipeline_retrieve(
            AnswerRequest(question=judged.question, k=k, use_llm=False),
            tenant=tenant,
            overrides={"include_summaries": include},
        )
        documents = {r.chunk.version.document.external_id for r in run.results}
        distinct.append(len(documents))
        recalls.append(len(documents & relevant) / len(relevant))
    if not distinct:
        return {"questions": 0}
    return {
        "questions": len(distinct),
        "distinct_documents@5": round(statistics.mean(distinct), 3),
        "context_recall@5": round(statistics.mean(recalls), 4),
    }


def quality(name: str, *, modes: list[str], broad: int) -> dict:
    from knowledge.models import Chunk
    from knowledge.summaries.services import summaries_refresh
    from quality.importers import dataset_load
    from quality.services import evaluation_run

    dataset = dataset_load(name=name, paths=DATASETS[name])
    tenant, judgment_list = tenant_without_summaries(dataset, name=name)

    def evaluate(mode: str, include: bool) -> dict:
        run = evaluation_run(
            judgment_list=judgment_list, mode=mode, overrides={"include_summaries": include}, k=100,
            splitter=dataset.splitter,
        )  # fmt: skip
        return {metric: run.metrics[metric] for metric in METRICS}

    entry: dict = {
        "documents": len(dataset.documents),
        "queries": len(dataset.judgments),
        "splitter": dataset.splitter,
        "modes": {},
    }
    for mode in modes:
        entry["modes"][mode] = {"off": evaluate(mode, True)}
        log(f"{name} {mode} off: {entry['modes'][mode]['off']}")
    entry["breadth"] = {"off": breadth(tenant, dataset, minimum=broad, include=True)} if name != "rag4p" else {}
    counts = summaries_refresh(tenant_id=tenant.pk, method="extractive")
    entry["summaries"] = {
        "written": counts["created"],
        "seconds": counts["seconds"],
        "body_chunks": Chunk.objects.for_tenant(tenant).filter(kind=Chunk.Kind.BODY, is_current=True).count(),
    }
    log(f"{name}: {counts}")
    for mode in modes:
        data = entry["modes"][mode]
        data["on"] = evaluate(mode, True)
        data["on_excluded"] = evaluate(mode, False)
        data["delta_on_minus_off"] = {m: round(data["on"][m] - data["off"][m], 4) for m in METRICS}
        log(f"{name} {mode} on: {data['on']}")
    if entry["breadth"]:
        entry["breadth"]["on"] = breadth(tenant, dataset, minimum=broad, include=True)
    return tenant, entry


def throughput(documents: int, rounds: int) -> dict:
    """Ingestion with summaries off vs on (ingestion + the summary task), interleaved."""
    from core.models import Tenant
    from core.services import tenant_create
    from knowledge.ingestion.splitters import get_splitter
    from knowledge.models import Source
    from knowledge.services import documents_ingest, source_get_or_create
    from knowledge.summaries.services import summaries_refresh
    from quality.importers import dataset_load

    sample = dataset_load(name="bioasq", paths=DATASETS["bioasq"]).documents[:documents]
    timings: dict[str, list[float]] = {"off": [], "on": []}
    summary_seconds: list[float] = []
    for round_number in range(rounds):
        for setting in ("off", "on"):
            tenant = tenant_create(slug=f"bench-summaries-throughput-{setting}-{round_number}-{time.time_ns()}")
            try:
                source = source_get_or_create(tenant=tenant, name="bioasq", kind=Source.Kind.DATASET)
                started = time.perf_counter()
                documents_ingest(tenant=tenant, source=source, documents=sample, splitter=get_splitter("max_tokens"))
                if setting == "on":
                    summary_seconds.append(summaries_refresh(tenant_id=tenant.pk, method="extractive")["seconds"])
                timings[setting].append(time.perf_counter() - started)
            finally:
                Tenant.objects.filter(pk=tenant.pk).delete()
            log(f"throughput round {round_number} {setting}: {timings[setting][-1]:.1f}s")
    off, on = statistics.median(timings["off"]), statistics.median(timings["on"])
    return {
        "documents": len(sample),
        "rounds": rounds,
        "off_docs_per_s": round(len(sample) / off, 1),
        "on_docs_per_s": round(len(sample) / on, 1),
        "on_over_off_time": round(on / off, 3),
        "summary_task_seconds_median": round(statistics.median(summary_seconds), 2),
        "note": "medians of interleaved rounds on a shared 2-core machine: only the ratio is meaningful",
    }


def main() -> None:
    django_setup()
    from core.models import Tenant

    parser = argparse.ArgumentParser()
    parser.add_argument("--datasets", nargs="+", default=list(DATASETS), choices=list(DATASETS))
    parser.add_argument("--modes", nargs="+", default=["hybrid"], choices=["hybrid", "lexical", "dense"])
    parser.add_argument("--broad", type=int, default=5, help="relevant documents a broad question has at least")
    parser.add_argument("--throughput-docs", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--keep", action="store_true", help="keep the bench-summaries-* tenants for the next run")
    parser.add_argument("--output", type=Path, default=ROOT / "benchmarks" / "results")
    args = parser.parse_args()

    report: dict = {"summary_method": "extractive", "k": 100, "datasets": {}}
    for name in args.datasets:
        tenant, entry = quality(name, modes=args.modes, broad=args.broad)
        report["datasets"][name] = entry
        if not args.keep:
            Tenant.objects.filter(pk=tenant.pk).delete()
    default_mode = args.modes[0]
    losses = {
        name: {m: entry["modes"][default_mode]["delta_on_minus_off"][m] for m in DECIDING}
        for name, entry in report["datasets"].items()
    }
    worst = min((delta for deltas in losses.values() for delta in deltas.values()), default=0.0)
    report["decision"] = {
        "mode": default_mode,
        "tolerance": TOLERANCE,
        "worst_delta": worst,
        "default_on": worst >= -TOLERANCE,
    }
    if args.throughput_docs:
        report["throughput"] = throughput(args.throughput_docs, args.rounds)
    args.output.mkdir(parents=True, exist_ok=True)
    (args.output / "summaries.json").write_text(json.dumps(report, indent=2))
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
