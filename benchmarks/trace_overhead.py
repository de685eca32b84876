"""Tracing overhead: p50/p95 (ms) of the ``simple`` answer pipeline with tracing on and off.

Usage: python benchmarks/trace_overhead.py [--tenant demo] [--rounds 3]
Answers extractively (no LLM), so the figures are the pipeline's own work plus the trace write.
The two settings take turns on each question (interleaved), after one warm-up pass. Prints one
JSON object; the target is ``on_over_off_p50`` <= 1.05.
"""

import argparse
import json
import statistics
import time

from _setup import django_setup
from search_latency import QUESTIONS, percentile


def main() -> None:
    django_setup()
    from core.models import Tenant
    from knowledge.models import Chunk
    from retrieval.models import Trace
    from retrieval.pipeline import pipeline_answer

    parser = argparse.ArgumentParser()
    parser.add_argument("--tenant", default="demo")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    tenant = Tenant.objects.filter(slug=args.tenant).first()
    if tenant is None:
        raise SystemExit(f"No tenant {args.tenant!r}: run the demo first.")
    for question in QUESTIONS:  # warm-up: model load, caches
        pipeline_answer(tenant=tenant, question=question, pipeline="simple", use_llm=False, trace=False)
    times: dict[str, list[float]] = {"on": [], "off": []}
    written: list[int] = []
    for round_ in range(args.rounds):
        for i, question in enumerate(QUESTIONS):
            order = ("on", "off") if (i + round_) % 2 == 0 else ("off", "on")
            for setting in order:
                started = time.perf_counter()
                run = pipeline_answer(
                    tenant=tenant, question=question, pipeline="simple", use_llm=False, trace=setting == "on"
                )
                times[setting].append((time.perf_counter() - started) * 1000)
                if run.trace_id:
                    written.append(run.trace_id)
    Trace.objects.filter(pk__in=written).delete()  # leave the tenant's traces as they were
    output = {
        "tenant": tenant.slug,
        "chunks": Chunk.objects.for_tenant(tenant).count(),
        "pipeline": "simple",
        "answers_per_setting": len(times["on"]),
        "tracing": {
            setting: {
                "p50_ms": round(percentile(values, 50), 1),
                "p95_ms": round(percentile(values, 95), 1),
                "mean_ms": round(statistics.mean(values), 1),
            }
            for setting, values in times.items()
        },
    }
    output["on_over_off_p50"] = round(output["tracing"]["on"]["p50_ms"] / output["tracing"]["off"]["p50_ms"], 3)
    print(json.dumps(output, indent=2))


if __name__ == "__main__":
    main()
