"""Retrieval quality with the enrichment field (keyphrases, LLM-free) at a few weights vs off.

Usage: python benchmarks/enrichment_quality.py [--datasets bioasq hotpotqa rag4p]
       [--weights 0 0.1 0.2 0.3 0.5] [--modes lexical hybrid] [--keep]
Each dataset is ingested into its ``bench-<dataset>`` tenant (as ``retrieval_quality.py`` does,
reused while unchanged), its chunks are enriched with keyphrases (``chunks_enrich(llm=None)``,
timed), then every mode is evaluated at every ``enrichment_weight`` (0 = off) with otherwise
default settings. Prints JSON (nDCG@10, recall@10, hit@1 and the headline metric's change from
off per weight) and writes benchmarks/results/enrichment_quality.json. Latencies are not
comparable across runs on a loaded machine; the metrics are deterministic.
"""

import argparse
import json
import sys
import time
from pathlib import Path

from _setup import ROOT, django_setup
from retrieval_quality import DATASETS, REFERENCE, tenant_for

METRICS = ("ndcg@10", "recall@10", "hit@1")


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def main() -> None:
    django_setup()
    from core.models import Tenant
    from knowledge.enrichment.services import chunks_enrich
    from knowledge.models import Chunk, ChunkEnrichment
    from quality.importers import dataset_load
    from quality.services import evaluation_run
    from retrieval.search import SearchConfig

    parser = argparse.ArgumentParser()
    parser.add_argument("--datasets", nargs="+", default=list(DATASETS), choices=list(DATASETS))
    parser.add_argument("--weights", nargs="+", type=float, default=[0.0, 0.1, 0.2, 0.3, 0.5])
    parser.add_argument("--modes", nargs="+", default=["lexical", "hybrid"], choices=["lexical", "dense", "hybrid"])
    parser.add_argument("--keep", action="store_true", help="keep the bench-* tenants for the next run")
    parser.add_argument("--output", type=Path, default=ROOT / "benchmarks" / "results")
    args = parser.parse_args()

    results: dict = {"weights": args.weights, "modes": args.modes, "datasets": {}}
    for name in args.datasets:
        dataset = dataset_load(name=name, paths=DATASETS[name])
        tenant, judgment_list, _report = tenant_for(dataset, name=name)
        try:
            t = time.perf_counter()
            enriched = chunks_enrich(tenant_id=tenant.pk, llm=None)
            chunks = Chunk.objects.for_tenant(tenant).filter(is_current=True).count()
            entry = {
                "chunks": chunks,
                "enriched": ChunkEnrichment.objects.for_tenant(tenant).count(),
                "enrich_seconds": round(time.perf_counter() - t, 2),
                "keyphrase_ms_per_chunk": round(1000 * enriched["keyphrase_seconds"] / max(enriched["chunks"], 1), 2),
                "headline": REFERENCE[name]["metric"],
                "modes": {},
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
    (args.output / "enrichment_quality.json").write_text(json.dumps(results, indent=2))
    print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
