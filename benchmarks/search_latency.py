"""Search latency p50/p95 (ms) per mode on a tenant, with the corpus size.

Usage: python benchmarks/search_latency.py [--tenant demo] [--rounds 3] [--cached] [--rls] [--dense-on-caller]
Runs 20 Django questions ``rounds`` times per mode after one warm-up pass; prints one JSON object
with, for hybrid, the mean of each timing (``lexical_ms``, ``embed_ms``, ``embed_wait_ms``,
``overlap_ms``: the embedding runs while BM25 does, ``dense_ms``, ``fusion_ms``, ``fetch_ms``).
The embedder's query cache is cleared before each search (repeated rounds would otherwise skip
the embedding) unless ``--cached``. ``--rls`` runs each search a second time inside
``core.rls.tenant_context`` (row-level security on, autocommit as in a request) and adds
``rls_modes`` and ``rls_over_plain_p50`` (the two interleaved, question by question), and a third
time inside one transaction as well (``rls_atomic_*``: a request under ``ATOMIC_REQUESTS``).
``--dense-on-caller`` runs each hybrid search a second time with ``KB_CONCURRENT_RETRIEVERS`` off
(only the embedding on the worker, the vector SQL after BM25 on the caller's connection) and adds
``dense_on_caller`` and ``dense_on_caller_over_worker_p50``, interleaved question by question.
"""

import argparse
import json
import statistics
import time

from _setup import django_setup
from _toolkit import percentile

QUESTIONS = [
    "How do I write a custom model field?",
    "How do I create a custom management command?",
    "What is a QuerySet and when is it evaluated?",
    "How do I add a database index to a model?",
    "How do I configure static files in production?",
    "What does select_related do?",
    "How do I write a custom template tag?",
    "How can I send email with Django?",
    "How do database transactions work in Django?",
    "What is the CSRF protection?",
    "How do I use class-based views?",
    "How do I paginate a list?",
    "What changed in Django 5.2?",
    "How do I write a data migration?",
    "How to deploy with ASGI?",
    "What is a ModelForm?",
    "How do I cache a view?",
    "How are signals dispatched?",
    "How do I customize the admin site?",
    "How do I test views with the test client?",
]


def main() -> None:
    django_setup()
    from django.db import transaction
    from django.test import override_settings

    from core.models import Tenant
    from core.rls import tenant_context
    from knowledge.embedders import get_embedder
    from knowledge.models import Chunk, Document
    from retrieval.request import AnswerRequest
    from retrieval.search import chunk_search

    parser = argparse.ArgumentParser()
    parser.add_argument("--tenant", default="demo")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("-k", type=int, default=10)
    parser.add_argument("--cached", action="store_true", help="keep the embedder's query cache between searches")
    parser.add_argument("--rls", action="store_true", help="also time each search under row-level security")
    parser.add_argument(
        "--dense-on-caller", action="store_true", help="also time hybrid with the vector SQL on the caller's connection"
    )
    args = parser.parse_args()
    tenant = Tenant.objects.filter(slug=args.tenant).first()
    if tenant is None:
        raise SystemExit(f"No tenant {args.tenant!r}: run the demo first.")
    output = {
        "tenant": tenant.slug,
        "chunks": Chunk.objects.for_tenant(tenant).count(),
        "documents": Document.objects.for_tenant(tenant).count(),
        "k": args.k,
        "queries_per_mode": len(QUESTIONS) * args.rounds,
        "modes": {},
    }
    for question in QUESTIONS:  # warm-up: model load, caches
        chunk_search(AnswerRequest(question=question, k=args.k), tenant=tenant)
    # Modes take turns on each question, so background load (autovacuum after a bulk load,
    # other processes) weighs on all three alike.
    totals: dict[str, list[float]] = {mode: [] for mode in ("dense", "lexical", "hybrid")}
    rls_totals: dict[str, list[float]] = {mode: [] for mode in totals}
    rls_atomic_totals: dict[str, list[float]] = {mode: [] for mode in totals}
    parts: dict[str, list[float]] = {}
    on_caller: list[float] = []
    embedder = get_embedder(tenant.embedder)

    def cache_clear() -> None:
        if not args.cached and hasattr(embedder, "query_cache_clear"):
            embedder.query_cache_clear()

    for _ in range(args.rounds):
        for question in QUESTIONS:
            for mode in totals:
                cache_clear()
                t = time.perf_counter()
                response = chunk_search(AnswerRequest(question=question, k=args.k, mode=mode), tenant=tenant)
                totals[mode].append((time.perf_counter() - t) * 1000)
                if mode == "hybrid":
                    for key, value in response.timings_ms.items():
                        parts.setdefault(key, []).append(value)
                    if args.dense_on_caller:
                        cache_clear()
                        with override_settings(KB_CONCURRENT_RETRIEVERS=False):
                            t = time.perf_counter()
                            chunk_search(AnswerRequest(question=question, k=args.k, mode=mode), tenant=tenant)
                            on_caller.append((time.perf_counter() - t) * 1000)
                if args.rls:
                    cache_clear()
                    t = time.perf_counter()
                    with tenant_context(tenant.pk):
                        chunk_search(AnswerRequest(question=question, k=args.k, mode=mode), tenant=tenant)
                    rls_totals[mode].append((time.perf_counter() - t) * 1000)
                    cache_clear()
                    t = time.perf_counter()
                    with tenant_context(tenant.pk), transaction.atomic():
                        chunk_search(AnswerRequest(question=question, k=args.k, mode=mode), tenant=tenant)
                    rls_atomic_totals[mode].append((time.perf_counter() - t) * 1000)
    for mode, times in totals.items():
        output["modes"][mode] = {
            "p50_ms": round(percentile(times, 50), 1),
            "p95_ms": round(percentile(times, 95), 1),
            "mean_ms": round(statistics.mean(times), 1),
        }
    if args.rls:
        output["rls_modes"] = {
            mode: {"p50_ms": round(percentile(times, 50), 1), "p95_ms": round(percentile(times, 95), 1)}
            for mode, times in rls_totals.items()
        }
        output["rls_over_plain_p50"] = {
            mode: round(percentile(rls_totals[mode], 50) / percentile(totals[mode], 50), 3) for mode in totals
        }
        output["rls_atomic_modes"] = {
            mode: {"p50_ms": round(percentile(times, 50), 1), "p95_ms": round(percentile(times, 95), 1)}
            for mode, times in rls_atomic_totals.items()
        }
        output["rls_atomic_over_plain_p50"] = {
            mode: round(percentile(rls_atomic_totals[mode], 50) / percentile(totals[mode], 50), 3) for mode in totals
        }
    if on_caller:
        output["dense_on_caller"] = {
            "p50_ms": round(percentile(on_caller, 50), 1),
            "p95_ms": round(percentile(on_caller, 95), 1),
        }
        output["dense_on_caller_over_worker_p50"] = round(
            percentile(on_caller, 50) / percentile(totals["hybrid"], 50), 3
        )
    output["hybrid_timings_mean_ms"] = {key: round(statistics.mean(values), 2) for key, values in parts.items()}
    output["hybrid_over_dense_p50"] = round(output["modes"]["hybrid"]["p50_ms"] / output["modes"]["dense"]["p50_ms"], 2)
    print(json.dumps(output, indent=2))


if __name__ == "__main__":
    main()
