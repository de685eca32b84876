"""LLM reranking: SuperRAG's grades as a reranker of the fused top N, against the fused order.

Usage: python benchmarks/llm_rerank.py --llm-url http://127.0.0.1:8093/v1 [--dataset bioasq]
       [--questions 20] [--candidates 20] [--batch 10] [--model qwen2.5-1.5b]
The dataset's whole corpus is ingested into its ``bench-<dataset>`` tenant (as
``retrieval_quality.py`` does, reused while unchanged); its first ``--questions`` questions are
then evaluated twice in hybrid mode: ``simple`` (the fused order) and ``superrag`` in ranking
mode, where the LLM grades the fused top ``--candidates`` chunks, ``--batch`` per call, and
orders them by grade (SuperRAG, seed ``superrag.txt``; ``retrieval.stages.rerank.llm_scoring``),
the rest following in fused order. The grading budget is lifted so every candidate is graded.
Prints JSON (nDCG@10, recall@10, MRR@10, hit@1, p50/p95 seconds per query, LLM calls and
tokens per query, degraded queries) and writes benchmarks/results/llm_rerank.json.
"""

import argparse
import json
import os
from pathlib import Path

from _setup import ROOT, django_setup
from _toolkit import log, tenant_for
from retrieval_quality import DATASETS

METRICS = ("ndcg@10", "recall@10", "mrr@10", "hit@1")


def figures(run) -> dict:
    """A run's ranking metrics, seconds per query and LLM cost per query."""
    metrics = run.metrics
    queries = max(metrics.get("queries", 0), 1)
    return {
        **{m: round(metrics[m], 4) for m in METRICS},
        "p50_s": round(metrics["p50_ms"] / 1000, 2),
        "p95_s": round(metrics["p95_ms"] / 1000, 2),
        "llm_calls_per_query": round(metrics.get("llm_calls", 0) / queries, 2),
        "tokens_in_per_query": round(metrics.get("tokens_in", 0) / queries),
        "tokens_out_per_query": round(metrics.get("tokens_out", 0) / queries),
        "degraded": metrics.get("degraded", 0),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--llm-url", required=True, help="an OpenAI-compatible /v1 URL serving --model")
    parser.add_argument("--model", default="qwen2.5-1.5b")
    parser.add_argument("--dataset", default="bioasq", choices=sorted(DATASETS))
    parser.add_argument("--questions", type=int, default=20, help="the first N questions are evaluated")
    parser.add_argument("--candidates", type=int, nargs="+", default=[20], help="fused top N the LLM grades")
    parser.add_argument("--batch", type=int, default=10, help="candidates graded per LLM call")
    parser.add_argument("--output", type=Path, default=ROOT / "benchmarks" / "results" / "llm_rerank.json")
    args = parser.parse_args()
    os.environ["KB_LLM_MODEL"] = args.model
    os.environ["OPENAI_BASE_URL"] = args.llm_url
    os.environ.setdefault("KB_LLM_TIMEOUT_S", "600")
    django_setup()
    from quality.importers import dataset_load
    from quality.models import JudgmentList
    from quality.services import evaluation_run, judgment_list_import

    dataset = dataset_load(name=args.dataset, paths=DATASETS[args.dataset])
    tenant, _full, _report = tenant_for(dataset, name=args.dataset)
    name = f"{args.dataset}-first{args.questions}"
    JudgmentList.objects.filter(tenant=tenant, name=name).delete()
    judgments = judgment_list_import(
        tenant=tenant, name=name, origin=args.dataset, judgments=dataset.judgments[: args.questions]
    )
    load_before = os.getloadavg()[0]
    rows = {"fused (simple)": figures(evaluation_run(judgment_list=judgments, pipeline="simple", mode="hybrid"))}
    log(f"fused: {rows['fused (simple)']}")
    for candidates in args.candidates:
        overrides = {"superrag_candidates": candidates, "superrag_batch": args.batch, "superrag_budget_s": 3600.0}
        run = evaluation_run(judgment_list=judgments, pipeline="superrag", mode="hybrid", overrides=overrides)
        rows[f"LLM-graded top {candidates}"] = figures(run)
        log(f"LLM top {candidates}: {rows[f'LLM-graded top {candidates}']}")
    out = {
        "benchmark": "llm_rerank",
        "machine": f"{os.cpu_count()} cores",
        "dataset": args.dataset,
        "questions": args.questions,
        "model": args.model,
        "batch": args.batch,
        "load_average_1min": {"before": load_before, "after": os.getloadavg()[0]},
        "rows": rows,
    }
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(out, indent=2))
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
