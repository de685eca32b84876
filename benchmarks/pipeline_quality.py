"""Retrieval quality of named pipelines (default ``simple`` against the RM3 ``expand``).

Usage: python benchmarks/pipeline_quality.py [--pipelines simple expand] [--modes lexical hybrid]
       [--datasets bioasq hotpotqa rag4p] [--keep]
Each dataset is ingested once into its ``bench-<dataset>`` tenant (as in ``retrieval_quality.py``),
then every pipeline runs in every mode on the same judgment list. With no LLM configured,
``expand`` is RM3 (Lavrenko & Croft 2001; fb_docs 10, fb_terms 10, original weight 0.5).
Writes benchmarks/results/pipeline_quality.{json,md} and prints the JSON. ``p50_ms`` is the
whole retrieval pipeline (rewrite stages included, query embedding included).
"""

import argparse
import json
from pathlib import Path

from _setup import ROOT, django_setup
from _toolkit import log, tenant_for
from retrieval_quality import DATASETS, REFERENCE

METRICS = ("ndcg@10", "recall@10", "recall@100", "mrr@10", "hit@1")


def markdown(results: dict) -> str:
    lines = [
        "| dataset | mode | pipeline | " + " | ".join(METRICS) + " | p50 ms | p95 ms |",
        "|---|---|---|" + "---|" * (len(METRICS) + 2),
    ]
    for name, data in results["datasets"].items():
        for mode, runs in data["modes"].items():
            for pipeline, run in runs.items():
                m = run["metrics"]
                cells = " | ".join(f"{m[metric]:.3f}" for metric in METRICS)
                lines.append(f"| {name} | {mode} | {pipeline} | {cells} | {m['p50_ms']:.1f} | {m['p95_ms']:.1f} |")
    lines += ["", "Headline metric per dataset (the one its reference figures use), pipeline against simple:", ""]
    lines += ["| dataset | metric | mode | " + " | ".join(results["pipelines"]) + " |"]
    lines += ["|---|---|---|" + "---|" * len(results["pipelines"])]
    for name, data in results["datasets"].items():
        metric = REFERENCE[name]["metric"]
        for mode, runs in data["modes"].items():
            cells = " | ".join(f"{runs[p]['metrics'][metric]:.3f}" for p in results["pipelines"])
            lines.append(f"| {name} | {metric} | {mode} | {cells} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    django_setup()
    from core.models import Tenant
    from knowledge.models import Chunk
    from quality.importers import dataset_load
    from quality.services import evaluation_run

    parser = argparse.ArgumentParser()
    parser.add_argument("--datasets", nargs="+", default=list(DATASETS), choices=list(DATASETS))
    parser.add_argument("--pipelines", nargs="+", default=["simple", "expand"])
    parser.add_argument("--modes", nargs="+", default=["lexical", "hybrid"], choices=["lexical", "dense", "hybrid"])
    parser.add_argument("--keep", action="store_true", help="keep the bench-* tenants for the next run")
    parser.add_argument("--output", type=Path, default=ROOT / "benchmarks" / "results")
    args = parser.parse_args()

    results: dict = {"k": 100, "pipelines": args.pipelines, "datasets": {}}
    for name in args.datasets:
        dataset = dataset_load(name=name, paths=DATASETS[name])
        tenant, judgment_list, _report = tenant_for(dataset, name=name)
        try:
            entry = {"queries": len(dataset.judgments), "chunks": Chunk.objects.for_tenant(tenant).count(), "modes": {}}
            for mode in args.modes:
                entry["modes"][mode] = {}
                for pipeline in args.pipelines:
                    run = evaluation_run(
                        judgment_list=judgment_list, pipeline=pipeline, mode=mode, k=100, splitter=dataset.splitter
                    )
                    entry["modes"][mode][pipeline] = {"run_id": run.pk, "metrics": run.metrics, "config": run.config}
                    log(f"{name} {mode} {pipeline}: {json.dumps(run.metrics)}")
            results["datasets"][name] = entry
        finally:
            if not args.keep:
                Tenant.objects.filter(pk=tenant.pk).delete()
    args.output.mkdir(parents=True, exist_ok=True)
    (args.output / "pipeline_quality.json").write_text(json.dumps(results, indent=2))
    (args.output / "pipeline_quality.md").write_text(markdown(results))
    print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
