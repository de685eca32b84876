"""Demo-tenant hybrid search p50/p95 (ms) with the default stages against every new stage switched on.

Usage: python benchmarks/stages_latency.py [--tenant demo] [--rounds 4]

The check: hybrid p50 on the demo tenant within 1.15 x of the defaults' with every optional
stage on. Besides the defaults (current-version filter, near-duplicate collapsing, recency), "every
stage on" adds the diversity caps, themes, the enrichment field at weight 0.1 and summary chunks
(the tenant needs them written first: ``manage.py enrich demo --no-questions`` and ``manage.py
summarize demo --method extractive``; without them those two stages have nothing to read). The
configurations are set on the tenant object in memory only (nothing is saved) and alternate per
question in a rotating order, with the query-embedding cache cleared before each search,
so background load weighs on all alike. Prints one JSON object with p50/p95 per configuration and
each one's p50 over the defaults' (``every_stage_on_over_defaults_p50``, and the same with the
enrichment field off: ``every_stage_on_but_enrichment_over_defaults_p50``).
"""

import argparse
import json
import os
import time

from _setup import django_setup
from search_latency import QUESTIONS, percentile

EVERY_STAGE = {"diversity": "caps", "themes": "on", "enrichment_weight": 0.1, "include_summaries": True}


def main() -> None:
    django_setup()
    from core.models import Tenant
    from knowledge.embedders import get_embedder
    from retrieval.search import chunk_search

    parser = argparse.ArgumentParser()
    parser.add_argument("--tenant", default="demo")
    parser.add_argument("--rounds", type=int, default=4)
    args = parser.parse_args()
    tenant = Tenant.objects.filter(slug=args.tenant).first()
    if tenant is None:
        raise SystemExit(f"No tenant {args.tenant!r}: run the demo first.")
    base = dict(tenant.retrieval_config or {})
    configs = {
        "defaults": base,
        "every_stage_on": {**base, **EVERY_STAGE},
        # The enrichment field is the one stage with its own SQL on the lexical path: apart.
        "every_stage_on_but_enrichment": {**base, **EVERY_STAGE, "enrichment_weight": 0.0},
    }
    embedder = get_embedder(tenant.embedder)
    for question in QUESTIONS:  # warm-up: model load, plans, caches
        for config in configs.values():
            tenant.retrieval_config = config
            chunk_search(tenant=tenant, query=question, k=10)
    times: dict[str, list[float]] = {name: [] for name in configs}
    names = list(configs)
    for turn in range(args.rounds):
        for i, question in enumerate(QUESTIONS):
            shift = (i + turn) % len(names)
            for name in names[shift:] + names[:shift]:
                tenant.retrieval_config = configs[name]
                if hasattr(embedder, "query_cache_clear"):
                    embedder.query_cache_clear()
                started = time.perf_counter()
                chunk_search(tenant=tenant, query=question, k=10)
                times[name].append((time.perf_counter() - started) * 1000)
    hybrid = {
        name: {"p50_ms": round(percentile(values, 50), 2), "p95_ms": round(percentile(values, 95), 2)}
        for name, values in times.items()
    }
    output = {
        "tenant": tenant.slug,
        "queries_per_config": len(times["defaults"]),
        "load_average_1min_at_end": round(os.getloadavg()[0], 1),
        "configs": configs,
        "hybrid": hybrid,
        **{
            f"{name}_over_defaults_p50": round(hybrid[name]["p50_ms"] / hybrid["defaults"]["p50_ms"], 3)
            for name in names[1:]
        },
    }
    print(json.dumps(output, indent=2))


if __name__ == "__main__":
    main()
