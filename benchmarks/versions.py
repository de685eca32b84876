"""Versions that retrieval respects: changed facts between Django 4.2 and 5.2, answered from the right release.

Usage: python benchmarks/versions.py [--tenant django-releases] [--rounds 3] [--fresh]

Ingests (once; ``--fresh`` rebuilds) the pages of ``demo.releases.PAGES`` from Django 4.2's and
5.2's source distributions as versions of the same documents, each with its release date as
``published_at`` (``demo.releases.releases_ingest``), then for each of ``CHANGED_FACTS``:

* retrieval (hybrid, k = 3): is the top-1 chunk from the expected release, from the fact's page,
  and is a chunk of that page and release in the top 3;
* the top 3 chunks' text: does it state the expected release's fact and none of the other's;
* the extractive answer (no LLM, top 3 passages): does it state the expected release's fact and none of the
  other release's (``demo.releases.fact_check``);

by default (5.2 expected) and ``as_of`` a date between the releases (4.2 expected). The same is
run with no version filter (what retrieval did before old versions were kept: both releases'
chunks visible) for contrast. Last, hybrid search latency (p50/p95, ms) of the three filters,
interleaved on the same questions. Prints one JSON object.
"""

import argparse
import json
import statistics
import time

from _setup import django_setup
from _toolkit import percentile


def main() -> None:
    django_setup()
    from django.conf import settings
    from psycopg import sql

    import retrieval.pipeline as pipeline_module
    from core.models import Tenant
    from core.services import tenant_create
    from demo.releases import AS_OF_BETWEEN, CHANGED_FACTS, PAGES, RELEASES, fact_check, releases_ingest
    from knowledge.embedders import get_embedder
    from knowledge.models import Chunk, Document, DocumentVersion
    from knowledge.services import source_get_or_create
    from retrieval.filters import RetrievalFilter
    from retrieval.pipeline import pipeline_answer
    from retrieval.request import AnswerRequest
    from retrieval.search import chunk_search

    parser = argparse.ArgumentParser()
    parser.add_argument("--tenant", default="django-releases")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--fresh", action="store_true", help="delete and re-ingest the tenant")
    args = parser.parse_args()

    tenant = Tenant.objects.filter(slug=args.tenant).first()
    if tenant is not None and args.fresh:
        tenant.delete()
        tenant = None
    ingest_seconds = None
    if tenant is None:
        tenant = tenant_create(slug=args.tenant, name="Django 4.2 and 5.2 docs")
        source = source_get_or_create(tenant=tenant, name="django-docs")
        started = time.perf_counter()
        releases_ingest(tenant=tenant, source=source, downloads=settings.KB_DATA_DIR / "downloads", pages=PAGES)
        ingest_seconds = round(time.perf_counter() - started, 1)

    class Unfiltered(RetrievalFilter):
        """Every version's chunks visible: the rule before old versions were kept (for contrast only)."""

        @property
        def narrows_tenant(self) -> bool:
            return bool(self.source_ids)

        def posting_condition(self, alias: str = "p"):
            return sql.SQL("TRUE")

        def _version_parts(self, chunk):
            return []

    original_filter = pipeline_module.retrieval_filter

    def unfiltered_filter(*, tenant, user=None, source_ids=None, as_of=None):
        return Unfiltered.for_tenant(tenant, source_ids=source_ids)

    def right_version(chunk, expected: str) -> bool:
        """5.2 expected: the current version (5.2's, or a page unchanged since 4.2); 4.2: dated 4.2's release."""
        if expected == "new":
            return chunk.version.is_current
        return chunk.version.published_at.date() == RELEASES[0].released

    def evaluate(*, expected: str, as_of=None, unfiltered: bool = False) -> dict:
        pipeline_module.retrieval_filter = unfiltered_filter if unfiltered else original_filter
        try:
            rows = []
            for fact in CHANGED_FACTS:
                top = chunk_search(AnswerRequest(question=fact.question, k=3, as_of=as_of), tenant=tenant).results
                answer = pipeline_answer(
                    AnswerRequest(question=fact.question, use_llm=False, as_of=as_of, strategy="top_n", k=3),
                    tenant=tenant,
                    trace=False,
                ).answer
                rows.append(
                    {
                        "question": fact.question,
                        "top1_version_right": bool(top) and right_version(top[0].chunk, expected),
                        "top1_page": top[0].chunk.version.document.external_id if top else None,
                        "top1_page_right": bool(top) and top[0].chunk.version.document.external_id == fact.document,
                        "top3_page_and_version_right": any(
                            r.chunk.version.document.external_id == fact.document and right_version(r.chunk, expected)
                            for r in top
                        ),
                        "top3_text_right": fact_check(fact, " ".join(r.chunk.text for r in top), release=expected),
                        "answer_right": fact_check(fact, answer.text, release=expected),
                        "cited_versions": sorted({c.as_dict()["version_date"] for c in answer.citations}),
                    }
                )
        finally:
            pipeline_module.retrieval_filter = original_filter
        totals = {
            key: sum(row[key] for row in rows)
            for key in (
                "top1_version_right",
                "top1_page_right",
                "top3_page_and_version_right",
                "top3_text_right",
                "answer_right",
            )
        }
        return {"facts": len(rows), **totals, "per_fact": rows}

    output = {
        "tenant": tenant.slug,
        "releases": {r.version: r.released.isoformat() for r in RELEASES},
        "as_of": AS_OF_BETWEEN.isoformat(),
        "documents": Document.objects.for_tenant(tenant).count(),
        "versions": DocumentVersion.objects.for_tenant(tenant).count(),
        "chunks": Chunk.objects.for_tenant(tenant).count(),
        "current_chunks": Chunk.objects.for_tenant(tenant).filter(is_current=True).count(),
        "ingest_seconds": ingest_seconds,
        "default_expect_5_2": evaluate(expected="new"),
        "as_of_expect_4_2": evaluate(expected="old", as_of=AS_OF_BETWEEN),
        "unfiltered_expect_5_2": evaluate(expected="new", unfiltered=True),
    }

    # Latency: hybrid search, k = 10, the three filters interleaved on each question.
    questions = [f.question for f in CHANGED_FACTS] + [
        "How do I configure the database connection?",
        "What does CONN_MAX_AGE do?",
        "How do I use a custom user model?",
        "What is the default value of DEBUG?",
        "Which field types store dates?",
        "How do I set up persistent connections?",
        "What are the settings for caching?",
        "How does Django handle time zones?",
    ]
    embedder = get_embedder(tenant.embedder)
    runs = {
        "current_only": lambda q: chunk_search(AnswerRequest(question=q, k=10), tenant=tenant),
        "as_of": lambda q: chunk_search(AnswerRequest(question=q, k=10, as_of=AS_OF_BETWEEN), tenant=tenant),
    }
    times: dict[str, list[float]] = {name: [] for name in [*runs, "no_version_filter"]}
    for q in questions:  # warm-up
        for run in runs.values():
            run(q)
    for _ in range(args.rounds):
        for q in questions:
            for name in times:
                if hasattr(embedder, "query_cache_clear"):
                    embedder.query_cache_clear()
                started = time.perf_counter()
                if name == "no_version_filter":
                    pipeline_module.retrieval_filter = unfiltered_filter
                    try:
                        chunk_search(AnswerRequest(question=q, k=10), tenant=tenant)
                    finally:
                        pipeline_module.retrieval_filter = original_filter
                else:
                    runs[name](q)
                times[name].append((time.perf_counter() - started) * 1000)

    output["hybrid_latency_ms"] = {
        name: {
            "p50": round(percentile(v, 50), 1),
            "p95": round(percentile(v, 95), 1),
            "mean": round(statistics.mean(v), 1),
            "queries": len(v),
        }
        for name, v in times.items()
    }
    print(json.dumps(output, indent=2))


if __name__ == "__main__":
    main()
