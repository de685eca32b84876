"""Does a small tenant's search slow down next to a large tenant? And where is the exact/HNSW crossover?

Usage: python benchmarks/multi_tenant.py [--small 5000] [--large 100000] [--queries 100]
       [--crossover 1000,2000,5000,10000,20000] [--keep]

1. Crossover: tenants of each ``--crossover`` size (synthetic chunks of real text and vectors,
   ``benchmarks/_corpus.py``) are searched with the exact scan and with their own HNSW index,
   interleaved per query; the threshold ``TENANT_INDEX_MIN_CHUNKS`` is picked from this.
2. Isolation: a ``--small`` tenant is searched alone (dense and hybrid p50/p95, query embedding
   excluded), then a ``--large`` tenant is loaded and the small tenant is searched again, with
   the design before per-tenant indexes (the shared per-embedder HNSW index with a tenant
   filter and iterative scan) timed in the same interleaved loop.
Prints one JSON object and writes ``benchmarks/results/multi_tenant.json``. ``--keep`` keeps
the tenants (``mt-small``, ``mt-x<size>`` and the large ``scale-<large>``, the same tenant
``benchmarks/scale.py`` builds and reuses) for a re-run; a re-run that finds the large tenant
kept cannot time the small tenant alone and reports ``small_alone: null``.
"""

import argparse
import json
from pathlib import Path

from _setup import django_setup

RESULTS = Path(__file__).resolve().parent / "results" / "multi_tenant.json"


def _shared_index_search(tenant, dense_hnsw):
    """The design before per-tenant indexes, timed in the same loop: dense search of ``tenant`` on
    the embedder's shared HNSW index (tenant filter, iterative scan). The tenant's own index is
    dropped inside a savepoint that is rolled back after each query (the timing includes that
    ~1 ms of catalog work), so the planner can only use the shared one."""
    from django.db import connection, transaction
    from psycopg import sql

    from knowledge.vector_index import vector_index_name

    drop = sql.SQL("DROP INDEX IF EXISTS {}").format(sql.Identifier(vector_index_name(tenant.embedder, tenant.pk)))

    def run(question, vector):
        with transaction.atomic():
            savepoint = transaction.savepoint()
            with connection.cursor() as cursor:
                cursor.execute(drop.as_string())
            dense_hnsw(question, vector)
            transaction.savepoint_rollback(savepoint)

    return run


def main() -> None:
    django_setup()
    import _corpus

    from knowledge.models import Tenant
    from knowledge.services.tenants import tenant_delete
    from knowledge.vector_index import TENANT_INDEX_MIN_CHUNKS, tenant_vector_indexes

    parser = argparse.ArgumentParser()
    parser.add_argument("--small", type=int, default=5000)
    parser.add_argument("--large", type=int, default=100_000)
    parser.add_argument("--queries", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--crossover", default="1000,2000,5000,10000,20000", help="sizes; empty to skip")
    parser.add_argument("--base-sentences", type=int, default=None, help="cap on base sentences (default all)")
    parser.add_argument("--keep", action="store_true", help="keep the tenants for the next run")
    parser.add_argument("--output", type=Path, default=RESULTS, help="JSON file to write")
    args = parser.parse_args()

    sentences = _corpus.base_sentences(args.base_sentences)
    vectors = _corpus.base_vectors(sentences)
    questions = _corpus.benchmark_questions(args.queries)
    qvectors = _corpus.question_vectors(questions)
    output: dict = {
        "machine_note": "2 shared cores; configurations interleaved per query; see ratios",
        "queries": len(questions),
        "threshold_chunks": TENANT_INDEX_MIN_CHUNKS,
        "crossover": {},
    }
    made = []

    for size in [int(s) for s in args.crossover.split(",") if s.strip()]:
        tenant, load = _corpus.tenant_of_size(
            f"mt-x{size}", size, sentences=sentences, vectors=vectors, seed=size, index=True
        )
        made.append(tenant)
        runs = _corpus.searchers(tenant)
        timed = _corpus.time_interleaved(
            {"exact": runs["dense_exact"], "hnsw": runs["dense_hnsw"]}, questions, qvectors, rounds=args.rounds
        )
        output["crossover"][size] = {
            **timed,
            "exact_over_hnsw_p50": round(timed["exact"]["p50_ms"] / timed["hnsw"]["p50_ms"], 2),
            "hnsw_recall_at_100_vs_exact": _corpus.dense_overlap(tenant, qvectors[:30]),
            "load": load,
        }
        print(json.dumps({size: output["crossover"][size]}), flush=True)

    small, load = _corpus.tenant_of_size(
        "mt-small", args.small, sentences=sentences, vectors=vectors, seed=1, index=None
    )
    made.append(small)
    runs = _corpus.searchers(small)
    pick = {"dense": runs["dense"], "hybrid": runs["hybrid"]}
    large_existing = Tenant.objects.filter(slug=f"scale-{args.large}").first()
    if large_existing is not None and not args.keep:
        tenant_delete(tenant=large_existing)
        large_existing = None
    if large_existing is None:
        output["small_alone"] = _corpus.time_interleaved(pick, questions, qvectors, rounds=args.rounds)
        print(json.dumps({"small_alone": output["small_alone"]}), flush=True)
    else:
        output["small_alone"] = None  # the large tenant was kept from an earlier run: see its results
    large, large_load = _corpus.tenant_of_size(
        f"scale-{args.large}", args.large, sentences=sentences, vectors=vectors, seed=2, index=None
    )
    made.append(large)
    output["large_load"] = large_load
    output["large_indexes"] = tenant_vector_indexes(tenant_id=large.pk)
    output["small_next_to_large"] = _corpus.time_interleaved(
        {**pick, "dense_shared_index": _shared_index_search(small, runs["dense_hnsw"])},
        questions,
        qvectors,
        rounds=args.rounds,
    )
    large_runs = _corpus.searchers(large)
    output["large_tenant"] = _corpus.time_interleaved(
        {"dense": large_runs["dense"], "hybrid": large_runs["hybrid"]}, questions, qvectors, rounds=args.rounds
    )
    if output["small_alone"]:
        alone, beside = output["small_alone"], output["small_next_to_large"]
        output["ratio_next_to_large_over_alone_p50"] = {
            mode: round(beside[mode]["p50_ms"] / alone[mode]["p50_ms"], 2) for mode in ("dense", "hybrid")
        }
        output["target_p50_ratio_max"] = 1.2
    if not args.keep:
        for tenant in made:
            tenant_delete(tenant=tenant)
    args.output.parent.mkdir(exist_ok=True)
    args.output.write_text(json.dumps(output, indent=2) + "\n")
    print(json.dumps(output, indent=2))


if __name__ == "__main__":
    main()
