"""A judgment list written by the local LLM against the one RAG4p ships, on the Vasa corpus.

Usage: python benchmarks/generated_judgments.py [--model qwen2.5-1.5b] [--llm-url URL]
       [--modes lexical dense hybrid] [--pipelines simple expand]
Prints JSON (and writes ``benchmarks/results/generated_judgments.json``).

The RAG4p quality design (seed ``rag-quality-design.txt``) writes one question per chunk with an
LLM and scores a retriever by hit@1: the question's own chunk must come first. Here the Vasa
corpus (``../shared/datasets/rag4p-vasa``) is ingested into ``bench-rag4p`` with its shipped list
(87 questions RAG4p generated with a large model), then ``judgment_generation_start`` (what
``manage.py judgments --generate`` runs) writes a list from every chunk of the tenant with the
local model, served by llama.cpp (2 threads, temperature 0). Each LLM-free retrieval pipeline in
each mode is evaluated on both lists: hit@1 and MRR@10, and whether the two lists rank the
configurations the same way. Generation time, questions written and rejected are reported.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _setup import ROOT, django_setup  # noqa: E402
from _toolkit import free_port, log, tenant_for  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="qwen2.5-1.5b")
    parser.add_argument("--llm-url", default=None)
    parser.add_argument("--modes", nargs="+", default=["lexical", "dense", "hybrid"])
    parser.add_argument("--pipelines", nargs="+", default=["simple", "expand"])
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    server = None
    url = args.llm_url
    if url is None:
        # The server starts before Django is set up, so the configured LLM can point at it.
        django_setup()
        from django.conf import settings

        from llm.local import local_llm_start

        port = free_port()
        server = local_llm_start(settings.KB_DATA_DIR, port=port, model=args.model)
        url = f"http://127.0.0.1:{port}/v1"
    os.environ["KB_LLM_MODEL"], os.environ["OPENAI_BASE_URL"] = args.model, url
    try:
        result = run(args, url)
    finally:
        if server is not None:
            server.terminate()
    out = ROOT / "benchmarks" / "results" / "generated_judgments.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    print(json.dumps(result, indent=2))


def run(args, url: str) -> dict:
    django_setup()
    from django.conf import settings
    from retrieval_quality import DATASETS

    from knowledge.models import Chunk
    from quality.importers import dataset_load
    from quality.models import Judgment
    from quality.services import evaluation_run
    from quality.services.generation import judgment_generation_start

    settings.KB_LLM_MODEL, settings.OPENAI_BASE_URL = args.model, url
    settings.KB_LLM_TIMEOUT_S = max(settings.KB_LLM_TIMEOUT_S, 600)
    dataset = dataset_load(name="rag4p", paths=DATASETS["rag4p"])
    tenant, shipped, _ = tenant_for(dataset, name="rag4p")
    chunks = Chunk.objects.for_tenant(tenant).filter(is_current=True, kind="body").count()
    load_before = round(os.getloadavg()[0], 2)
    started = time.perf_counter()
    generation = judgment_generation_start(tenant=tenant, sample=chunks, seed=args.seed)
    generation.refresh_from_db()
    seconds = time.perf_counter() - started
    generated = generation.judgment_list
    if generated is None:
        raise SystemExit(f"The generation did not produce a list: {generation.get_status_display()} {generation.error}")
    log(
        f"generated {generation.progress_done}/{generation.progress_total}, {generation.rejected} rejected, {seconds:.0f}s"
    )
    lists = {"shipped": shipped, "generated": generated}
    table: dict = {}
    for mode in args.modes:
        for pipeline in args.pipelines:
            label = f"{pipeline} {mode}"
            table[label] = {}
            for name, judgment_list in lists.items():
                evaluation = evaluation_run(judgment_list=judgment_list, pipeline=pipeline, mode=mode, k=10)
                table[label][name] = {key: evaluation.metrics[key] for key in ("hit@1", "mrr@10", "ndcg@10")}
                log(f"{label} {name}: {table[label][name]}")
    order = {name: sorted(table, key=lambda label: -table[label][name]["hit@1"]) for name in lists}
    return {
        "benchmark": "generated_judgments",
        "machine": "2 cores",
        "model": args.model,
        "chunks": chunks,
        "shipped_questions": Judgment.objects.filter(judgment_list=shipped).count(),
        "generated_questions": Judgment.objects.filter(judgment_list=generated).count(),
        "rejected": generation.rejected,
        "generation_s": round(seconds, 1),
        "seconds_per_question": round(seconds / max(1, generation.progress_total), 2),
        "load_average_1min_before": load_before,
        "load_average_1min_after": round(os.getloadavg()[0], 2),
        "configurations": table,
        "order_by_hit@1": order,
        "same_order": order["shipped"] == order["generated"],
    }


if __name__ == "__main__":
    main()
