"""Retrieval quality with the enrichment field at a few weights vs off: keyphrases, or doc2query.

Usage: python benchmarks/enrichment_quality.py [--datasets bioasq hotpotqa rag4p]
       [--weights 0 0.1 0.2 0.3 0.5] [--modes lexical hybrid] [--keep]
       [--llm-url URL [--model qwen2.5-1.5b] [--questions-per-chunk 3]] [--first N] [--output-name NAME]
Each dataset is ingested into its ``bench-<dataset>`` tenant (as ``retrieval_quality.py`` does,
reused while unchanged), its chunks are enriched with keyphrases (``chunks_enrich(llm=None)``,
timed), then every mode is evaluated at every ``enrichment_weight`` (0 = off) with otherwise
default settings. With ``--llm-url`` the field also holds doc2query questions (Nogueira et al.
2019) written by that endpoint's model, in a tenant of its own (``bench-<dataset>-d2q``).
``--first N`` keeps the first N questions of BioASQ and HotpotQA and only their documents (every
LLM call costs seconds on a CPU; BioASQ: the documents relevant to them, HotpotQA: their
context paragraphs, distractors included). Prints JSON (nDCG@10, recall@10, hit@1 and the
headline metric's change from off per weight, seconds per chunk) and writes
benchmarks/results/<output-name>.json (default ``enrichment_quality``). Latencies are not
comparable across runs on a loaded machine; the metrics are deterministic.
"""

import argparse
import json
import os
import time
from pathlib import Path

from _setup import ROOT, django_setup
from _toolkit import log, tenant_for
from retrieval_quality import DATASETS, REFERENCE

METRICS = ("ndcg@10", "recall@10", "hit@1")


def first_questions(dataset, name: str, n: int):
    """``dataset`` cut to its first ``n`` questions and their documents (module docstring)."""
    from dataclasses import replace

    from embedders import bioasq_subset

    if name == "bioasq":
        return bioasq_subset(dataset, n)
    if name != "hotpotqa":
        return replace(dataset, judgments=dataset.judgments[:n])
    raw = json.loads(DATASETS[name][0].read_text())[:n]
    titles = {title for item in raw for title in item["context"]["title"]}
    documents = [d for d in dataset.documents if d.external_id in titles]
    return replace(dataset, judgments=dataset.judgments[:n], documents=documents)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--datasets", nargs="+", default=list(DATASETS), choices=list(DATASETS))
    parser.add_argument("--weights", nargs="+", type=float, default=[0.0, 0.1, 0.2, 0.3, 0.5])
    parser.add_argument("--modes", nargs="+", default=["lexical", "hybrid"], choices=["lexical", "dense", "hybrid"])
    parser.add_argument("--keep", action="store_true", help="keep the bench-* tenants for the next run")
    parser.add_argument("--output", type=Path, default=ROOT / "benchmarks" / "results")
    parser.add_argument("--output-name", default="enrichment_quality", help="file name (no .json) under --output")
    parser.add_argument("--llm-url", default=None, help="an OpenAI-compatible /v1 URL: doc2query questions too")
    parser.add_argument("--model", default="qwen2.5-1.5b", help="the model --llm-url serves")
    parser.add_argument("--questions-per-chunk", type=int, default=3)
    parser.add_argument("--first", type=int, default=None, help="only the first N questions and their documents")
    args = parser.parse_args()
    if args.llm_url:
        os.environ.update(
            KB_LLM_MODEL=args.model, OPENAI_BASE_URL=args.llm_url, KB_LLM_TIMEOUT_S="600", KB_LLM_CONCURRENCY="1"
        )
    django_setup()
    from core.models import Tenant
    from knowledge.enrichment.services import CONFIGURED, chunks_enrich
    from knowledge.models import Chunk, ChunkEnrichment
    from quality.importers import dataset_load
    from quality.services import evaluation_run
    from retrieval.search import SearchConfig

    field = (
        f"keyphrases and {args.questions_per_chunk} doc2query questions by {args.model}"
        if args.llm_url
        else "keyphrases"
    )
    results: dict = {
        "machine": f"{os.cpu_count()} cores",
        "field": field,
        "first_questions": args.first,
        "weights": args.weights,
        "modes": args.modes,
        "datasets": {},
    }
    for name in args.datasets:
        dataset = dataset_load(name=name, paths=DATASETS[name])
        label = name
        if args.first and name != "rag4p":
            dataset, label = first_questions(dataset, name, args.first), f"{name}-first{args.first}"
        slug = f"bench-{label}-d2q" if args.llm_url else f"bench-{label}"
        tenant, judgment_list, _report = tenant_for(dataset, name=name, slug=slug)
        try:
            t = time.perf_counter()
            load_before = os.getloadavg()[0]
            enriched = chunks_enrich(
                tenant_id=tenant.pk, llm=CONFIGURED if args.llm_url else None, questions=args.questions_per_chunk
            )
            chunks = Chunk.objects.for_tenant(tenant).filter(is_current=True).count()
            stored = ChunkEnrichment.objects.for_tenant(tenant)
            entry = {
                "questions": len(dataset.judgments),
                "chunks": chunks,
                "enriched": stored.count(),
                "enrich_seconds": round(time.perf_counter() - t, 2),
                "keyphrase_ms_per_chunk": round(1000 * enriched["keyphrase_seconds"] / max(enriched["chunks"], 1), 2),
                "headline": REFERENCE[name]["metric"],
                "modes": {},
            }
            if args.llm_url:
                entry |= {
                    "with_questions": stored.exclude(questions=[]).count(),
                    "questions_failed": stored.exclude(questions_error="").count(),
                    "llm_seconds_per_chunk": round(enriched["llm_seconds"] / max(enriched["chunks"], 1), 2),
                    "load_average_1min": {"before": load_before, "after": os.getloadavg()[0]},
                    "usage": enriched.get("usage"),
                    "examples": list(
                        stored.exclude(questions=[]).order_by("chunk_id").values_list("questions", flat=True)[:5]
                    ),
                }
            log(f"{name}: enriched {enriched}")
            base = SearchConfig.for_tenant(tenant)
            for mode in args.modes:
                runs = []
                for weight in args.weights:
                    config = SearchConfig.from_dict({**base.as_dict(), "enrichment_weight": weight})
                    run = evaluation_run(judgment_list=judgment_list, mode=mode, config=config, k=100)
                    metrics = {m: round(run.metrics[m], 4) for m in METRICS}
                    runs.append({"weight": weight, **metrics, "p50_ms": round(run.metrics["p50_ms"], 1)})
                    log(f"{name} {mode} w={weight}: {metrics}")
                off = next((r for r in runs if r["weight"] == 0), runs[0])
                for r in runs:
                    r["headline_delta"] = round(r[entry["headline"]] - off[entry["headline"]], 4)
                entry["modes"][mode] = runs
            results["datasets"][name] = entry
        finally:
            if not args.keep:
                Tenant.objects.filter(pk=tenant.pk).delete()
    # A weight is acceptable when no dataset's headline metric drops by more than 0.005 in any mode.
    results["acceptable_weights"] = [
        w
        for i, w in enumerate(args.weights)
        if all(
            run[i]["headline_delta"] >= -0.005
            for data in results["datasets"].values()
            for run in data["modes"].values()
        )
    ]
    args.output.mkdir(parents=True, exist_ok=True)
    (args.output / f"{args.output_name}.json").write_text(json.dumps(results, indent=2))
    print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
