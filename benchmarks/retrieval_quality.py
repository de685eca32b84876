"""Retrieval quality on the shared datasets, every mode, beside the reference figures.

Usage: python benchmarks/retrieval_quality.py [--datasets bioasq hotpotqa rag4p] [--keep]
       [--variants]   also evaluate alternative fusion settings on the same tenants
Writes benchmarks/results/retrieval_quality.json and .md and prints the JSON.
Each dataset is ingested once into a tenant ``bench-<dataset>`` (reused while its documents are
unchanged: re-ingesting unchanged content is free), then evaluated in lexical, dense and hybrid
mode with the default configuration. The datasets are read from ../shared/datasets.
"""

import argparse
import json
from pathlib import Path

from _setup import ROOT, django_setup
from _toolkit import log, tenant_for

DATASETS_DIR = ROOT.parent / "shared" / "datasets"
DATASETS = {
    "bioasq": [DATASETS_DIR / "bioasq" / "bioasq-12b-dev.json"],
    "hotpotqa": [DATASETS_DIR / "hotpotqa" / "hotpotqa-distractor-dev50.json"],
    "rag4p": [DATASETS_DIR / "rag4p-vasa"],
}
# Reference figures from ../shared/datasets/README.md (BM25, dense MiniLM, RRF k=60).
REFERENCE = {
    "bioasq": {"metric": "ndcg@10", "lexical": 0.825, "dense": 0.856, "hybrid": 0.887},
    "hotpotqa": {"metric": "recall@10", "lexical": 0.930, "dense": 0.900, "hybrid": 0.940},
    "rag4p": {"metric": "hit@1", "lexical": 0.805, "dense": 0.885, "hybrid": 0.862},
}
TARGET = {
    "bioasq": {"lexical": 0.81, "dense": 0.85, "hybrid": 0.89},
    "hotpotqa": {"lexical": 0.92, "dense": 0.89, "hybrid": 0.95},
    "rag4p": {"lexical": 0.80, "dense": 0.88, "hybrid": 0.89},
}
VARIANTS = [
    {"fusion": "rrf", "rrf_k": 60},
    {"fusion": "rrf", "rrf_k": 20},
    {"fusion": "weighted", "dense_weight": 0.7, "lexical_weight": 0.3},
    {"fusion": "weighted", "dense_weight": 0.6, "lexical_weight": 0.4},
    {"fusion": "weighted", "dense_weight": 0.5, "lexical_weight": 0.5},
    {"fusion": "tm2c2", "dense_weight": 0.7, "lexical_weight": 0.3},
    {"fusion": "tm2c2", "dense_weight": 0.6, "lexical_weight": 0.4},
    {"fusion": "tm2c2", "dense_weight": 0.5, "lexical_weight": 0.5},
    {"fusion": "dbsf", "dense_weight": 0.6, "lexical_weight": 0.4},
    {"fusion": "dbsf", "dense_weight": 0.5, "lexical_weight": 0.5},
]


def markdown(results: dict) -> str:
    lines = [
        "| dataset | metric | lexical | dense | hybrid | reference (BM25 / dense / RRF) | target (lex / dense / hybrid) |",
        "|---|---|---|---|---|---|---|",
    ]
    for name, data in results["datasets"].items():
        metric = REFERENCE[name]["metric"]
        cells = [f"{data['modes'][m]['metrics'][metric]:.3f}" for m in ("lexical", "dense", "hybrid")]
        ref = " / ".join(f"{REFERENCE[name][m]:.3f}" for m in ("lexical", "dense", "hybrid"))
        target = " / ".join(f"{TARGET[name][m]:.2f}" for m in ("lexical", "dense", "hybrid"))
        lines.append(f"| {name} | {metric} | {' | '.join(cells)} | {ref} | {target} |")
    lines += [
        "",
        "| dataset | mode | nDCG@10 | recall@10 | recall@100 | MRR@10 | hit@1 | p50 ms | p95 ms |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for name, data in results["datasets"].items():
        for mode, run in data["modes"].items():
            m = run["metrics"]
            lines.append(
                f"| {name} | {mode} | {m['ndcg@10']:.3f} | {m['recall@10']:.3f} | {m['recall@100']:.3f} | "
                f"{m['mrr@10']:.3f} | {m['hit@1']:.3f} | {m['p50_ms']:.1f} | {m['p95_ms']:.1f} |"
            )
    if any("variants" in d for d in results["datasets"].values()):
        lines += [
            "",
            "Fusion variants (hybrid):",
            "",
            "| variant | " + " | ".join(f"{n} {REFERENCE[n]['metric']}" for n in results["datasets"]) + " |",
            "|---|" + "---|" * len(results["datasets"]),
        ]
        labels = [v["label"] for v in next(iter(results["datasets"].values())).get("variants", [])]
        for i, label in enumerate(labels):
            cells = [
                f"{d['variants'][i]['metrics'][REFERENCE[n]['metric']]:.3f}" for n, d in results["datasets"].items()
            ]
            lines.append(f"| {label} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def main() -> None:
    django_setup()
    from dataclasses import replace

    from core.models import Tenant
    from knowledge.models import Chunk
    from quality.importers import dataset_load
    from quality.services import evaluation_run
    from retrieval.search import SearchConfig

    parser = argparse.ArgumentParser()
    parser.add_argument("--datasets", nargs="+", default=list(DATASETS), choices=list(DATASETS))
    parser.add_argument("--variants", action="store_true", help="also evaluate alternative fusion settings")
    parser.add_argument("--keep", action="store_true", help="keep the bench-* tenants for the next run")
    parser.add_argument("--output", type=Path, default=ROOT / "benchmarks" / "results")
    args = parser.parse_args()

    results: dict = {"k": 100, "datasets": {}}
    for name in args.datasets:
        dataset = dataset_load(name=name, paths=DATASETS[name])
        tenant, judgment_list, _report = tenant_for(dataset, name=name)
        try:
            entry = {
                "documents": len(dataset.documents),
                "queries": len(dataset.judgments),
                "chunks": Chunk.objects.for_tenant(tenant).count(),
                "splitter": dataset.splitter,
                "modes": {},
            }
            base = SearchConfig.for_tenant(tenant)
            for mode in ("lexical", "dense", "hybrid"):
                run = evaluation_run(
                    judgment_list=judgment_list, mode=mode, config=base, k=100, splitter=dataset.splitter
                )
                entry["modes"][mode] = {"run_id": run.pk, "metrics": run.metrics}
                log(f"{name} {mode}: {json.dumps(run.metrics)}")
            entry["config"] = {k: v for k, v in run.config.items()}
            if args.variants:
                entry["variants"] = []
                for variant in VARIANTS:
                    config = replace(base, **variant)
                    run = evaluation_run(judgment_list=judgment_list, mode="hybrid", config=config, k=100)
                    label = ", ".join(f"{k}={v}" for k, v in variant.items())
                    entry["variants"].append({"label": label, "metrics": run.metrics})
                    log(f"{name} hybrid [{label}]: {json.dumps(run.metrics)}")
            results["datasets"][name] = entry
        finally:
            if not args.keep:
                Tenant.objects.filter(pk=tenant.pk).delete()
    args.output.mkdir(parents=True, exist_ok=True)
    (args.output / "retrieval_quality.json").write_text(json.dumps(results, indent=2))
    (args.output / "retrieval_quality.md").write_text(markdown(results))
    print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
