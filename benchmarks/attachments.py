"""What hiding the files attached to conversations costs every search: lexical (BM25) p50/p95 in ms.

Usage: python benchmarks/attachments.py [--documents 2000] [--files 200] [--rounds 5]

Runs in a scratch database of its own (``kb_attach_bench``, Django's test-database machinery,
kept between runs), so it needs no demo and leaves the development database alone. One tenant
holds ``--documents`` synthetic documents (three sentences of a fixed vocabulary each, stored with
random unit vectors: only BM25 is timed). Then 20 queries are searched ``--rounds`` times,
each in both settings, taking turns on which goes first:

* ``none``: the tenant has no attached file and no conversation source (``attached_versions_hidden``
  reads the source index and stops; the filter is the plain one), as most tenants;
* ``hidden``: ``--files`` of the documents are in the tenant's conversation source (moved there
  before the search, moved back after), so the search hides them (the filter's
  ``version_id <> ALL(...)`` on chunks, ``NOT IN`` on the postings), as every search outside
  their conversation does.

Each search is ``retrieval.search.chunk_search`` with ``mode="lexical"``, ``user=None`` (no access
rules), so the difference is the hidden files' alone; ``lookup_ms`` times the one extra query
(``attached_versions_hidden``) each search now runs, in both settings. Prints one JSON object;
``hidden_files_returned`` counts hidden files found (must be 0).
"""

import argparse
import json
import random
import time

import numpy as np
from _setup import django_setup
from _toolkit import log, percentile

WORDS = (
    "budget invoice kiln glaze workshop travel expense receipt manager approve contract supplier "
    "warehouse shipment customs tariff pallet forklift safety helmet training audit report quarter "
    "revenue forecast hiring onboarding laptop account password backup server database index query "
    "cache latency release deploy rollback incident alert pager rota holiday leave parental policy"
).split()
QUERIES = [" ".join(random.Random(n).sample(WORDS, 3)) for n in range(20)]


class RandomEmbedder:
    """Unit vectors from a seeded generator: the chunks need an embedding, the benchmark times BM25 only."""

    def __init__(self, key: str, dimensions: int = 384):
        self.key, self.dimensions, self.batch_size = key, dimensions, 256
        self.rng = np.random.default_rng(1)

    def embed(self, texts):
        vectors = self.rng.normal(size=(len(texts), self.dimensions)).astype(np.float32)
        return vectors / np.linalg.norm(vectors, axis=1, keepdims=True)

    def embed_query(self, text):
        return self.embed([text])[0]


def scratch_database() -> None:
    """Point the default connection at the benchmark's own database, creating and migrating it once."""
    from django.db import connection

    connection.settings_dict.setdefault("TEST", {})["NAME"] = "kb_attach_bench"
    log("scratch database kb_attach_bench (migrated once, then kept)")
    connection.creation.create_test_db(verbosity=0, autoclobber=True, keepdb=True)


def corpus(documents: int):
    """The tenant ``attach-bench`` with ``documents`` synthetic documents (made once, then reused)."""
    from core.models import Tenant
    from knowledge.ingestion.readers import ReadDocument
    from knowledge.models import Document, Source
    from knowledge.services import documents_ingest

    tenant = Tenant.objects.filter(slug="attach-bench").first()
    if tenant is not None and Document.objects.filter(tenant=tenant).count() == documents:
        return tenant
    Tenant.objects.filter(slug="attach-bench").delete()
    tenant = Tenant.objects.create(slug="attach-bench", name="Attach bench", embedder="local")
    source = Source.objects.create(tenant=tenant, name="handbook")
    rng = random.Random(7)
    embedder = RandomEmbedder(tenant.embedder)
    batch = []
    for n in range(documents):
        sentences = [" ".join(rng.choices(WORDS, k=12)).capitalize() + "." for _ in range(3)]
        batch.append(ReadDocument(external_id=f"doc-{n}", title=f"Note {n}", text="\n\n".join(sentences)))
        if len(batch) == 500 or n == documents - 1:
            documents_ingest(tenant=tenant, source=source, documents=batch, embedder=embedder)
            batch = []
            log(f"ingested {n + 1} of {documents}")
    return tenant


def main() -> None:
    django_setup()
    parser = argparse.ArgumentParser()
    parser.add_argument("--documents", type=int, default=2000)
    parser.add_argument("--files", type=int, default=200, help="documents moved into the conversation source")
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    scratch_database()

    from knowledge.attachments import attached_versions_hidden
    from knowledge.models import Chunk, Document, Source
    from retrieval.request import AnswerRequest
    from retrieval.search import chunk_search

    tenant = corpus(args.documents)
    handbook = Source.objects.get(tenant=tenant, name="handbook")
    Document.objects.filter(tenant=tenant).exclude(source=handbook).update(source=handbook)  # an earlier run's
    Source.objects.filter(tenant=tenant, kind=Source.Kind.CONVERSATION).delete()
    ids = list(Document.objects.filter(tenant=tenant).order_by("pk").values_list("pk", flat=True))
    files = set(ids[:: max(1, len(ids) // args.files)][: args.files])

    def attached(on: bool) -> None:
        """The files in the tenant's conversation source (``on``), or no such source at all."""
        if on:
            source, _ = Source.objects.get_or_create(
                tenant=tenant, name="Conversation files", kind=Source.Kind.CONVERSATION
            )
            Document.objects.filter(pk__in=files).update(source=source)
        else:
            Document.objects.filter(pk__in=files).update(source=handbook)
            Source.objects.filter(tenant=tenant, kind=Source.Kind.CONVERSATION).delete()

    timings: dict[str, list[float]] = {"none": [], "hidden": []}
    lookups: dict[str, list[float]] = {"none": [], "hidden": []}
    returned = 0
    for _ in range(args.rounds):
        for n, query in enumerate(QUERIES):
            for setting in ("none", "hidden") if n % 2 else ("hidden", "none"):
                attached(setting == "hidden")
                started = time.perf_counter()
                attached_versions_hidden(tenant=tenant)
                lookups[setting].append((time.perf_counter() - started) * 1000)
                started = time.perf_counter()
                results = chunk_search(AnswerRequest(question=query, k=10, mode="lexical"), tenant=tenant).results
                timings[setting].append((time.perf_counter() - started) * 1000)
                if setting == "hidden":
                    returned += sum(1 for r in results if r.chunk.version.document_id in files)
    attached(False)

    def summary(values: list[float], digits: int = 2) -> dict:
        return {"p50": round(percentile(values, 50), digits), "p95": round(percentile(values, 95), digits)}

    output = {
        "documents": args.documents,
        "chunks": Chunk.objects.filter(tenant=tenant).count(),
        "files": len(files),
        "rounds": args.rounds,
        "lexical_search_ms": {setting: summary(values) for setting, values in timings.items()},
        "hidden_p50_ratio": round(percentile(timings["hidden"], 50) / percentile(timings["none"], 50), 3),
        "lookup_ms": {setting: summary(values, 3) for setting, values in lookups.items()},
        "hidden_files_returned": returned,
    }
    print(json.dumps(output, indent=2))


if __name__ == "__main__":
    main()
