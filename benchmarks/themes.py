"""Themes packing: does packing the best chunk of each theme first give the context
more of the relevant material than packing the top k by score?

Usage: python benchmarks/themes.py [--datasets bioasq hotpotqa] [--k 5] [--pool 30]
Prints JSON. For every question of each dataset (tenant ``bench-<dataset>``, built the way
``benchmarks/retrieval_quality.py`` builds it), the hybrid pipeline retrieves the best ``pool``
chunks once; then the context's top ``k`` is taken (a) by score and (b) by theme
(``retrieval.stages.themes.results_by_theme``) for a grid of thresholds and distances. Reported
per setting: context recall@k (share of a question's relevant documents present in the k
packed chunks, averaged), distinct documents in the k, and how often themes changed anything.
"""

import argparse
import json
import statistics
import sys
import time

from _setup import django_setup
from _toolkit import tenant_for
from retrieval_quality import DATASETS

GRID = [(threshold, distance) for threshold in (0.5, 0.6, 0.7) for distance in (0.3, 0.5, 0.7)]


def main() -> None:
    django_setup()
    from quality.importers import dataset_load
    from retrieval.pipeline import pipeline_retrieve
    from retrieval.request import AnswerRequest
    from retrieval.stages.themes import results_by_theme

    parser = argparse.ArgumentParser()
    parser.add_argument("--datasets", nargs="+", default=["bioasq", "hotpotqa"], choices=["bioasq", "hotpotqa"])
    parser.add_argument("--k", type=int, default=5)
    parser.add_argument("--pool", type=int, default=30)
    args = parser.parse_args()

    report: dict = {"k": args.k, "pool": args.pool, "datasets": {}}
    for name in args.datasets:
        dataset = dataset_load(name=name, paths=DATASETS[name])
        tenant, _list, _report = tenant_for(dataset, name=name)
        rows = []
        for judged in dataset.judgments:
            run = pipeline_retrieve(
                AnswerRequest(question=judged.question, pipeline="simple", k=args.pool, use_llm=False), tenant=tenant
            )
            relevant = {entry["document"] for entry in judged.relevant}
            rows.append((run.results, relevant))

        def measure(order_for, rows=rows):
            recalls, distinct, changed, ms = [], [], 0, []
            for results, relevant in rows:
                started = time.perf_counter()
                order = order_for(results)
                ms.append((time.perf_counter() - started) * 1000)
                top = order[: args.k]
                documents = {r.chunk.version.document.external_id for r in top}
                recalls.append(len(documents & relevant) / len(relevant))
                distinct.append(len(documents))
                changed += [r.chunk.pk for r in top] != [r.chunk.pk for r in results[: args.k]]
            return {
                "context_recall": round(statistics.mean(recalls), 4),
                "distinct_documents": round(statistics.mean(distinct), 3),
                "changed_share": round(changed / len(rows), 3),
                "p50_ms": round(statistics.median(ms), 2),
            }

        entry = {"questions": len(rows), "by_score": measure(lambda results: list(results))}
        for threshold, distance in GRID:
            entry[f"themes t={threshold} d={distance}"] = measure(
                lambda results, t=threshold, d=distance, tenant_id=tenant.pk: results_by_theme(
                    list(results), tenant_id=tenant_id, k=args.k, threshold=t, distance=d
                )[0]
            )
        report["datasets"][name] = entry
        print(f"{name} done", file=sys.stderr, flush=True)
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
