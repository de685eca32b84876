"""The content-hash embedding cache (``KB_EMBED_CACHE``, ``knowledge.embedders.base.EmbeddingCache``):
ingestion's embedding time with the cache off and on, where texts come back.

Usage: python benchmarks/embed_cache.py [--limit N] [--edited F]
Corpus: the first N BioASQ documents of ``../shared/datasets/bioasq`` (PubMed abstracts). Each
side (cache off, then on, each with an empty cache and a fresh tenant) runs, in order:

1. ``first``: the documents ingested into a new tenant (nothing cached yet);
2. ``edited``: a fraction F of them edited (a sentence added at the end) and ingested again:
   untouched documents are skipped by their hash as before, the edited ones are split again and
   their unchanged chunks are what the cache saves;
3. ``second_tenant``: the same documents ingested into a second tenant (a copy, a re-index, a
   tenant moved to another embedder and back).

Prints one JSON object: per side and step the seconds of the whole ingestion and of its
embedding, the chunks, and the cache's hits and misses.
"""

import argparse
import json
import time
import uuid
from dataclasses import replace
from pathlib import Path

from _setup import ROOT, django_setup

BIOASQ = ROOT.parent / "shared" / "datasets" / "bioasq" / "bioasq-12b-dev.json"


def main() -> None:
    django_setup()
    from django.conf import settings

    from core.models import Tenant
    from core.services import tenant_create
    from knowledge.embedders import get_embedder
    from knowledge.embedders.base import EmbeddingCache
    from knowledge.services import documents_ingest, source_get_or_create
    from quality.importers import load_bioasq

    parser = argparse.ArgumentParser()
    parser.add_argument("--limit", type=int, default=300, help="BioASQ documents to ingest")
    parser.add_argument("--edited", type=float, default=0.2, help="fraction of documents edited")
    args = parser.parse_args()
    if not Path(BIOASQ).exists():
        raise SystemExit(f"No corpus at {BIOASQ}.")

    documents = load_bioasq(BIOASQ).documents[: args.limit]
    every = max(1, round(1 / args.edited)) if args.edited else 0
    edited = [
        replace(d, text=d.text + "\n\nThis abstract was revised by its authors.") if every and i % every == 0 else d
        for i, d in enumerate(documents)
    ]
    settings.KB_NEAR_DUPLICATES = False  # the post-ingestion tasks are not what is measured here
    settings.KB_ENRICHMENT = False
    embedder = get_embedder("local")
    embedder.embed(["warm up"])

    def step(tenant, docs) -> dict:
        source = source_get_or_create(tenant=tenant, name="bench")
        before = embedder.embedding_cache.info()
        started = time.perf_counter()
        report = documents_ingest(tenant=tenant, source=source, documents=docs)
        seconds = time.perf_counter() - started
        after = embedder.embedding_cache.info()
        return {
            "seconds": round(seconds, 2),
            "embed_seconds": round(report.embed_seconds, 2),
            "chunks_embedded": after["hits"] + after["misses"] - before["hits"] - before["misses"],
            "cache_hits": after["hits"] - before["hits"],
            "cache_misses": after["misses"] - before["misses"],
            "counts": report.counts(),
        }

    sides = {}
    for side, size in (("cache_off", 0), ("cache_on", settings.KB_EMBED_CACHE)):
        embedder.embedding_cache = EmbeddingCache(size)
        tenants = [tenant_create(slug=f"bench-{uuid.uuid4().hex[:8]}") for _ in range(2)]
        try:
            sides[side] = {
                "first": step(tenants[0], documents),
                "edited": step(tenants[0], edited),
                "second_tenant": step(tenants[1], documents),
            }
        finally:
            Tenant.objects.filter(pk__in=[t.pk for t in tenants]).delete()
    embedder.embedding_cache = EmbeddingCache(settings.KB_EMBED_CACHE)

    def saved(key: str) -> float:
        off, on = sides["cache_off"][key]["embed_seconds"], sides["cache_on"][key]["embed_seconds"]
        return round(1 - on / off, 3) if off else 0.0

    print(
        json.dumps(
            {
                "corpus": "bioasq-12b-dev",
                "documents": len(documents),
                "edited_documents": sum(a is not b for a, b in zip(documents, edited, strict=True)),
                "kb_embed_cache": settings.KB_EMBED_CACHE,
                "sides": sides,
                "embed_seconds_saved": {key: saved(key) for key in ("first", "edited", "second_tenant")},
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
