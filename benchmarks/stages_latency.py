"""Demo-tenant hybrid search p50/p95 (ms) with the default stages against every new stage switched on.

Usage: python benchmarks/stages_latency.py [--tenant demo] [--rounds 4] [--outside [--user member]]

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

``--outside`` measures instead where a default hybrid search's time goes, step by step: each
question is searched as ``chunk_search`` does (``pipeline_spec`` then ``pipeline_retrieve``,
query-embedding cache cleared) by an anonymous caller and by the tenant's member ``--user``
(default ``member``, the demo's; skipped when absent), alternating. Per caller it prints the
p50/p95 of the total wall time, of each step, of ``stages_ms`` (the ranking's steps: retrieve,
which holds the query embedding and both retrievers, fuse, which loads the rows, and the signal
rerankers; not ``scope``), of ``retrieve_ms``, of ``scope_ms`` (the ``scope`` step where the
code has one, else 0) and of ``untraced_ms`` (the total minus every step), and
``total_over_stages_p50`` and ``total_over_retrieve_p50``. Only APIs that older revisions share
are used, so ``search_latency_ab.py --outside`` runs this very file against two revisions.
"""

import argparse
import json
import os
import time

from _setup import django_setup
from _toolkit import percentile
from search_latency import QUESTIONS

EVERY_STAGE = {"diversity": "caps", "themes": "on", "enrichment_weight": 0.1, "include_summaries": True}


def _p(values: list[float]) -> dict:
    return {"p50_ms": round(percentile(values, 50), 2), "p95_ms": round(percentile(values, 95), 2)}


def outside_measure(tenant, *, rounds: int, username: str) -> dict:
    """Where a default hybrid search's wall time goes (see the module docstring): ``{"callers":
    {caller: {"total": {p50_ms, p95_ms}, "steps": {stage: {...}}, "stages_ms": ..., "retrieve_ms":
    ..., "scope_ms": ..., "untraced_ms": ..., "total_over_stages_p50", "total_over_retrieve_p50"}},
    "queries_per_caller"}``. Every figure in milliseconds."""
    from django.contrib.auth import get_user_model

    from knowledge.embedders import get_embedder
    from retrieval.pipeline import pipeline_retrieve, pipeline_spec
    from retrieval.request import AnswerRequest

    member = get_user_model().objects.filter(username=username, memberships__tenant=tenant).first()
    callers = {"anonymous": None, **({f"member ({username})": member} if member is not None else {})}
    embedder = get_embedder(tenant.embedder)

    def search(question: str, user):
        started = time.perf_counter()
        spec = pipeline_spec(tenant=tenant, name="simple")  # what chunk_search does
        run = pipeline_retrieve(AnswerRequest(question=question, k=10), tenant=tenant, user=user, spec=spec)
        return run, (time.perf_counter() - started) * 1000

    for question in QUESTIONS:  # warm-up: model load, plans, caches
        for user in callers.values():
            search(question, user)
    seen: dict[str, dict[str, list[float]]] = {name: {} for name in callers}
    names = list(callers)
    for turn in range(rounds):
        for i, question in enumerate(QUESTIONS):
            shift = (i + turn) % len(names)
            for name in names[shift:] + names[:shift]:
                if hasattr(embedder, "query_cache_clear"):
                    embedder.query_cache_clear()
                run, total = search(question, callers[name])
                steps: dict[str, float] = {}
                for step in run.steps:
                    steps[step.stage] = steps.get(step.stage, 0.0) + step.ms
                figures = {
                    "total": total,
                    "stages_ms": sum(ms for stage, ms in steps.items() if stage != "scope"),
                    "retrieve_ms": steps.get("retrieve", 0.0),
                    "scope_ms": steps.get("scope", 0.0),
                    "untraced_ms": total - sum(steps.values()),
                    **{f"step:{stage}": ms for stage, ms in steps.items()},
                }
                for key, value in figures.items():
                    seen[name].setdefault(key, []).append(value)
    out: dict = {"queries_per_caller": len(QUESTIONS) * rounds, "callers": {}}
    for name, values in seen.items():
        total_p50 = percentile(values["total"], 50)
        out["callers"][name] = {
            "total": _p(values["total"]),
            "steps": {key[5:]: _p(v) for key, v in values.items() if key.startswith("step:")},
            **{key: _p(values[key]) for key in ("stages_ms", "retrieve_ms", "scope_ms", "untraced_ms")},
            "total_over_stages_p50": round(total_p50 / percentile(values["stages_ms"], 50), 3),
            "total_over_retrieve_p50": round(total_p50 / percentile(values["retrieve_ms"], 50), 3),
        }
    return out


def main() -> None:
    django_setup()
    from core.models import Tenant
    from knowledge.embedders import get_embedder
    from retrieval.request import AnswerRequest
    from retrieval.search import chunk_search

    parser = argparse.ArgumentParser()
    parser.add_argument("--tenant", default="demo")
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--outside", action="store_true", help="where a default hybrid search's time goes")
    parser.add_argument("--user", default="member", help="the member --outside also searches as")
    args = parser.parse_args()
    tenant = Tenant.objects.filter(slug=args.tenant).first()
    if tenant is None:
        raise SystemExit(f"No tenant {args.tenant!r}: run the demo first.")
    if args.outside:
        load = round(os.getloadavg()[0], 1)
        measured = outside_measure(tenant, rounds=args.rounds, username=args.user)
        output = {
            "tenant": tenant.slug,
            "cpu_count": os.cpu_count(),
            "load_average_1min": {"start": load, "end": round(os.getloadavg()[0], 1)},
            **measured,
        }
        print(json.dumps(output, indent=2))
        return
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
            chunk_search(AnswerRequest(question=question, k=10), tenant=tenant)
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
                chunk_search(AnswerRequest(question=question, k=10), tenant=tenant)
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
