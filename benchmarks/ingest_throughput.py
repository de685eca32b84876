"""Ingestion throughput (chunks/s) beside the raw embedder's throughput on the same chunk texts.

Usage: python benchmarks/ingest_throughput.py [--docs PATH] [--limit N]
Default corpus: the Django docs the demo downloaded (``$KB_DATA_DIR/downloads/django-*/docs/topics``).
Ingests into a throw-away tenant (deleted afterwards) and prints one JSON object.
"""

import argparse
import json
import time
import uuid
from pathlib import Path

from _setup import django_setup


def main() -> None:
    django_setup()
    from django.conf import settings

    from knowledge.dedup.services import near_duplicates_refresh
    from knowledge.embedders import get_embedder
    from knowledge.ingestion.readers import read_path
    from knowledge.ingestion.splitters import get_splitter
    from knowledge.models import Tenant
    from knowledge.services import (
        collect_files,
        documents_ingest,
        embedding_input,
        source_get_or_create,
        tenant_create,
    )

    parser = argparse.ArgumentParser()
    default = next(iter(sorted((settings.KB_DATA_DIR / "downloads").glob("django-*/docs"))), None)
    parser.add_argument("--docs", type=Path, default=default / "topics" if default else None)
    parser.add_argument("--limit", type=int, default=60, help="files to ingest")
    args = parser.parse_args()
    if args.docs is None or not args.docs.exists():
        raise SystemExit("No corpus: run the demo first or pass --docs PATH.")

    files = collect_files([args.docs])[: args.limit]
    documents = [d for f, root in files for d in read_path(f, root=root, fmt="rst")]
    splitter = get_splitter()
    texts = [embedding_input(s) for d in documents for s in splitter.split(d)]
    embedder = get_embedder("local")
    embedder.embed(texts[:8])  # warm up

    t = time.perf_counter()
    embedder.embed(texts)
    raw_seconds = time.perf_counter() - t

    tenant = tenant_create(slug=f"bench-{uuid.uuid4().hex[:8]}")
    try:
        source = source_get_or_create(tenant=tenant, name="bench")
        # The near-duplicate task (queued on commit, eager without a broker) is timed apart.
        settings.KB_NEAR_DUPLICATES = False
        t = time.perf_counter()
        report = documents_ingest(tenant=tenant, source=source, documents=documents, splitter=splitter)
        ingest_seconds = time.perf_counter() - t
        t = time.perf_counter()
        near_duplicates_refresh(tenant_id=tenant.pk)
        near_duplicates_seconds = time.perf_counter() - t
        t = time.perf_counter()
        again = documents_ingest(tenant=tenant, source=source, documents=documents, splitter=splitter)
        reingest_seconds = time.perf_counter() - t
    finally:
        Tenant.objects.filter(pk=tenant.pk).delete()
    chunks = report.counts()["chunks"]
    print(
        json.dumps(
            {
                "corpus": str(args.docs),
                "documents": len(documents),
                "chunks": chunks,
                "characters": sum(len(d.text) for d in documents),
                "raw_embedder_chunks_per_s": round(len(texts) / raw_seconds, 1),
                "ingest_chunks_per_s": round(chunks / ingest_seconds, 1),
                "ingest_seconds": round(ingest_seconds, 2),
                "near_duplicates_seconds": round(near_duplicates_seconds, 3),
                "ingest_chunks_per_s_with_near_duplicates": round(
                    chunks / (ingest_seconds + near_duplicates_seconds), 1
                ),
                "near_duplicates_on_vs_off": round(ingest_seconds / (ingest_seconds + near_duplicates_seconds), 4),
                "with_near_duplicates_vs_raw_embedder": round(
                    (chunks / (ingest_seconds + near_duplicates_seconds)) / (len(texts) / raw_seconds), 4
                ),
                "embed_seconds_within_ingest": round(report.embed_seconds, 2),
                "reingest_unchanged_seconds": round(reingest_seconds, 2),
                "reingest_unchanged": again.counts()["unchanged"],
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
