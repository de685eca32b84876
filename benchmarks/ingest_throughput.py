"""Ingestion throughput (chunks/s) beside the raw embedder's throughput on the same chunk texts.

Usage: python benchmarks/ingest_throughput.py [--docs PATH] [--limit N] [--rounds R]
Default corpus: the Django docs the demo downloaded (``$KB_DATA_DIR/downloads/django-*/docs/topics``).
Each round embeds the chunk texts alone (the raw embedder), then ingests them into a throw-away
tenant (deleted afterwards) and runs the post-ingestion steps on it, each timed apart: the
near-duplicate search and the enrichment (keyphrases, LLM-free; ``knowledge.enrichment``). Rounds
interleave the raw and the full measurements, so a loaded machine slows both alike; ratios are
per round, and the JSON gives each round and the median. Prints one JSON object.
"""

import argparse
import json
import statistics
import time
import uuid
from pathlib import Path

from _setup import django_setup


def main() -> None:
    django_setup()
    from django.conf import settings

    from core.models import Tenant
    from core.services import tenant_create
    from knowledge.dedup.services import near_duplicates_refresh
    from knowledge.embedders import get_embedder
    from knowledge.enrichment.services import chunks_enrich
    from knowledge.ingestion.readers import read_path
    from knowledge.ingestion.splitters import get_splitter
    from knowledge.services import collect_files, documents_ingest, embedding_input, source_get_or_create

    parser = argparse.ArgumentParser()
    default = next(iter(sorted((settings.KB_DATA_DIR / "downloads").glob("django-*/docs"))), None)
    parser.add_argument("--docs", type=Path, default=default / "topics" if default else None)
    parser.add_argument("--limit", type=int, default=60, help="files to ingest")
    parser.add_argument("--rounds", type=int, default=2, help="interleaved raw/full measurements")
    args = parser.parse_args()
    if args.docs is None or not args.docs.exists():
        raise SystemExit("No corpus: run the demo first or pass --docs PATH.")

    files = collect_files([args.docs])[: args.limit]
    documents = [d for f, root in files for d in read_path(f, root=root, fmt="rst")]
    splitter = get_splitter()
    texts = [embedding_input(s) for d in documents for s in splitter.split(d)]
    embedder = get_embedder("local")
    embedder.embed(texts[:8])  # warm up
    # The post-ingestion tasks (queued on commit, eager without a broker) are timed apart.
    settings.KB_NEAR_DUPLICATES = False
    settings.KB_ENRICHMENT = False

    rounds = []
    for _ in range(args.rounds):
        t = time.perf_counter()
        embedder.embed(texts)
        raw_seconds = time.perf_counter() - t
        tenant = tenant_create(slug=f"bench-{uuid.uuid4().hex[:8]}")
        try:
            source = source_get_or_create(tenant=tenant, name="bench")
            t = time.perf_counter()
            report = documents_ingest(tenant=tenant, source=source, documents=documents, splitter=splitter)
            ingest_seconds = time.perf_counter() - t
            t = time.perf_counter()
            near_duplicates_refresh(tenant_id=tenant.pk)
            near_duplicates_seconds = time.perf_counter() - t
            t = time.perf_counter()
            enriched = chunks_enrich(tenant_id=tenant.pk, llm=None)
            enrichment_seconds = time.perf_counter() - t
            t = time.perf_counter()
            again = documents_ingest(tenant=tenant, source=source, documents=documents, splitter=splitter)
            reingest_seconds = time.perf_counter() - t
        finally:
            Tenant.objects.filter(pk=tenant.pk).delete()
        chunks = report.counts()["chunks"]
        raw = len(texts) / raw_seconds
        full_seconds = ingest_seconds + near_duplicates_seconds + enrichment_seconds
        rounds.append(
            {
                "raw_embedder_chunks_per_s": round(raw, 1),
                "ingest_chunks_per_s": round(chunks / ingest_seconds, 1),
                "ingest_seconds": round(ingest_seconds, 2),
                "embed_seconds_within_ingest": round(report.embed_seconds, 2),
                "near_duplicates_seconds": round(near_duplicates_seconds, 3),
                "enrichment_seconds": round(enrichment_seconds, 3),
                "enriched_chunks": enriched["chunks"],
                "ingest_vs_raw_embedder": round((chunks / ingest_seconds) / raw, 4),
                "with_near_duplicates_vs_raw_embedder": round(
                    (chunks / (ingest_seconds + near_duplicates_seconds)) / raw, 4
                ),
                "with_near_duplicates_and_enrichment_vs_raw_embedder": round((chunks / full_seconds) / raw, 4),
                "reingest_unchanged_seconds": round(reingest_seconds, 2),
                "reingest_unchanged": again.counts()["unchanged"],
            }
        )

    def median(key):
        return round(statistics.median(r[key] for r in rounds), 4)

    print(
        json.dumps(
            {
                "corpus": str(args.docs),
                "documents": len(documents),
                "chunks": rounds[0]["enriched_chunks"],
                "characters": sum(len(d.text) for d in documents),
                "rounds": rounds,
                "median": {
                    key: median(key)
                    for key in (
                        "raw_embedder_chunks_per_s",
                        "ingest_chunks_per_s",
                        "ingest_vs_raw_embedder",
                        "with_near_duplicates_vs_raw_embedder",
                        "with_near_duplicates_and_enrichment_vs_raw_embedder",
                        "enrichment_seconds",
                    )
                },
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
