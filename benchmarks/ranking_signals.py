"""Ranking signals (recency and quality, diversity) on the dev sets and the demo tenant.

Usage: python benchmarks/ranking_signals.py [--datasets rag4p hotpotqa bioasq] [--demo demo]
       [--mini-demo] [--keep] [--latency ROUNDS]
Prints one JSON object. For each dev set (ingested into ``bench-<name>`` like
``benchmarks/retrieval_quality.py`` does, reusing its ``tenant_for``) every variant of
``DATASET_VARIANTS`` runs the ``simple`` pipeline in hybrid mode over the judgment list (100
chunks per query, as ``quality.services.evaluation_run`` does) and reports nDCG@10, recall@10,
hit@1 (the project's metrics, ``quality.metrics``) and the mean number of distinct documents and
sources among the top 10 chunks; ``delta_ndcg@10`` is against ``defaults`` (recency on, diversity off). On the demo tenant
(``--demo``, built by ``scripts/demo.sh --no-serve``) ``DEMO_QUESTIONS`` run with k = 10 under
``DEMO_VARIANTS`` (``--mini-demo``: a smaller tenant with the demo's five sources, ``MINI_DEMO``,
built first) and report distinct documents and sources in the top 10, how many of the top 3
are release notes, and where the current reference ranks for the primary-key question.
"""

import argparse
import json
import statistics

from _setup import ROOT, django_setup
from _toolkit import log, percentile, tenant_for
from retrieval_quality import DATASETS, DATASETS_DIR
from search_latency import QUESTIONS as LATENCY_QUESTIONS

if not DATASETS_DIR.is_dir():  # run from a git worktree (/work/wt/<name>): the datasets are two levels up
    DATASETS = {
        name: [ROOT.parent.parent / path.relative_to(ROOT.parent) for path in paths] for name, paths in DATASETS.items()
    }

DEFAULTS: dict = {}  # the tenant's settings as shipped: recency on, diversity off
OFF = {"recency": "off", "diversity": "off"}
DATASET_VARIANTS = {
    "defaults": DEFAULTS,
    "recency, ingestion dates, half-life 365 d": {"recency_undated": "ingested", "recency_half_life_days": 365.0},
    "caps 1/document": {"diversity": "caps", "diversity_per_document": 1},
    "caps 2/document": {"diversity": "caps", "diversity_per_document": 2},
    "mmr lambda 0.7": {"diversity": "mmr", "mmr_lambda": 0.7},
    "mmr lambda 0.9": {"diversity": "mmr", "mmr_lambda": 0.9},
}
# A smaller tenant shaped like the demo's (its five sources, the releases source with a one-year
# half-life), for machines where ingesting all 10,738 demo chunks takes too long: the parts of
# Django's docs that the demo questions hit. Paths are relative to Django's ``docs/``.
MINI_DEMO = {
    "topics": ["topics/db", "topics/cache.txt", "topics/email.txt", "topics/signals.txt"],
    "howto": ["howto/custom-model-fields.txt", "howto/custom-management-commands.txt"],
    "ref": ["ref/models", "ref/settings.txt", "ref/csrf.txt"],
    "intro-faq": ["faq"],
    "releases": [
        f"releases/{v}.txt" for v in ("3.2", "4.0", "4.1", "4.2", "5.0", "5.1", "5.2", "5.2.1", "5.2.2", "5.2.3")
    ],
}
PRIMARY_KEY = "What is the default primary key type?"
DEMO_QUESTIONS = [PRIMARY_KEY, "How do I write a custom model field?", *LATENCY_QUESTIONS]
DEMO_VARIANTS = {
    "off": OFF,
    "recency floor 0 (no floor)": {"recency": "on", "recency_floor": 0.0},
    "recency floor 0.25": {"recency": "on", "recency_floor": 0.25},
    "recency floor 0.5 (default)": {"recency": "on", "recency_floor": 0.5},
    "recency floor 0.75": {"recency": "on", "recency_floor": 0.75},
    "caps 2/document": {**OFF, "diversity": "caps", "diversity_per_document": 2},
    "caps 2/document, 4/source": {
        **OFF,
        "diversity": "caps",
        "diversity_per_document": 2,
        "diversity_per_source": 4,
    },
    "mmr lambda 0.7": {**OFF, "diversity": "mmr", "mmr_lambda": 0.7},
    "recency + caps 2/document": {"recency": "on", "diversity": "caps", "diversity_per_document": 2},
}


def distinct(results, n: int = 10) -> tuple[int, int]:
    top = results[:n]
    return (
        len({r.chunk.version.document_id for r in top}),
        len({r.chunk.version.document.source_id for r in top}),
    )


def dataset_variant(*, tenant, judgments, duplicates, overrides: dict) -> dict:
    """Mean metrics of the ``simple`` pipeline (hybrid, 100 chunks) with ``overrides`` over ``judgments``."""
    from quality.metrics import metrics_aggregate, query_metrics
    from quality.services.runs import _judged_ranking
    from retrieval.pipeline import pipeline_retrieve
    from retrieval.request import AnswerRequest

    per_query, latencies, documents, sources = [], [], [], []
    for judgment in judgments:
        run = pipeline_retrieve(
            AnswerRequest(question=judgment.question[:2000], pipeline="simple", mode="hybrid", k=100),
            tenant=tenant,
            overrides=overrides,
        )
        ranking, grades, _top = _judged_ranking(run.results, judgment.relevant, duplicates)
        per_query.append(query_metrics(ranking, grades))
        latencies.append(run.total_ms)
        d, s = distinct(run.results)
        documents.append(d)
        sources.append(s)
    metrics = metrics_aggregate(per_query, latencies)
    return {
        "ndcg@10": round(metrics["ndcg@10"], 4),
        "recall@10": round(metrics["recall@10"], 4),
        "hit@1": round(metrics["hit@1"], 4),
        "distinct_documents@10": round(statistics.mean(documents), 2),
        "distinct_sources@10": round(statistics.mean(sources), 2),
        "p50_ms": round(metrics["p50_ms"], 1),
    }


def datasets_measure(names: list[str], *, keep: bool) -> dict:
    from core.models import Tenant
    from quality.importers import dataset_load
    from quality.models import Judgment
    from quality.services.runs import _duplicate_documents

    out: dict = {}
    for name in names:
        dataset = dataset_load(name=name, paths=DATASETS[name])
        tenant, judgment_list, _report = tenant_for(dataset, name=name)
        try:
            judgments = list(Judgment.objects.filter(judgment_list=judgment_list).order_by("pk"))
            duplicates = _duplicate_documents(tenant)
            variants = {}
            for label, overrides in DATASET_VARIANTS.items():
                variants[label] = dataset_variant(
                    tenant=tenant, judgments=judgments, duplicates=duplicates, overrides=overrides
                )
                log(f"{name} [{label}]: {json.dumps(variants[label])}")
            base = variants["defaults"]["ndcg@10"]
            for data in variants.values():
                data["delta_ndcg@10"] = round(data["ndcg@10"] - base, 4)
            out[name] = {"queries": len(judgments), "variants": variants}
        finally:
            if not keep:
                Tenant.objects.filter(pk=tenant.pk).delete()
    return out


def demo_measure(slug: str) -> dict:
    from core.models import Tenant
    from knowledge.models import Chunk, Source
    from retrieval.pipeline import pipeline_retrieve
    from retrieval.request import AnswerRequest

    tenant = Tenant.objects.filter(slug=slug).first()
    if tenant is None:
        raise SystemExit(f"No tenant {slug!r}: run scripts/demo.sh --no-serve first (or pass --demo '').")
    releases = set(Source.objects.filter(tenant=tenant, name="releases").values_list("pk", flat=True))
    out: dict = {
        "tenant": slug,
        "chunks": Chunk.objects.for_tenant(tenant).count(),
        "sources": Source.objects.filter(tenant=tenant).count(),
        "questions": len(DEMO_QUESTIONS),
        "variants": {},
    }
    for label, overrides in DEMO_VARIANTS.items():
        documents, sources, release_top3 = [], [], []
        primary: dict = {}
        for question in DEMO_QUESTIONS:
            run = pipeline_retrieve(
                AnswerRequest(question=question, pipeline="simple", k=10), tenant=tenant, overrides=overrides
            )
            d, s = distinct(run.results)
            documents.append(d)
            sources.append(s)
            release_top3.append(sum(r.chunk.version.document.source_id in releases for r in run.results[:3]))
            if question == PRIMARY_KEY:
                primary = {
                    "top3": [
                        f"{r.chunk.version.document.source.name}:{r.chunk.version.document.external_id}"
                        for r in run.results[:3]
                    ],
                    "first_reference_rank": next(
                        (r.rank for r in run.results if r.chunk.version.document.source_id not in releases), None
                    ),
                }
        out["variants"][label] = {
            "distinct_documents@10": round(statistics.mean(documents), 2),
            "distinct_sources@10": round(statistics.mean(sources), 2),
            "release_notes_in_top3": round(statistics.mean(release_top3), 2),
            "primary_key_question": primary,
        }
        log(f"demo [{label}]: {json.dumps(out['variants'][label])}")
    return out


LATENCY_VARIANTS = {
    "stages off": OFF,
    "recency": {"recency": "on", "diversity": "off"},
    "recency + caps": {"recency": "on", "diversity": "caps", "diversity_per_document": 2},
    "recency + mmr": {"recency": "on", "diversity": "mmr", "mmr_lambda": 0.7},
}


def latency_measure(slug: str, *, rounds: int) -> dict:
    """Hybrid search p50/p95 (ms, k = 10, query embedding included) per ``LATENCY_VARIANTS``.

    The variants take turns on each question (like ``benchmarks/search_latency.py`` interleaves
    modes), so background load weighs on all alike; ``p50_over_off`` is each p50 over the
    stages-off p50.
    """
    import time

    from core.models import Tenant
    from knowledge.embedders import get_embedder
    from retrieval.pipeline import pipeline_retrieve
    from retrieval.request import AnswerRequest

    tenant = Tenant.objects.get(slug=slug)
    embedder = get_embedder(tenant.embedder)
    for question in LATENCY_QUESTIONS:  # warm-up
        pipeline_retrieve(AnswerRequest(question=question, pipeline="simple", mode="hybrid", k=10), tenant=tenant)
    times: dict[str, list[float]] = {label: [] for label in LATENCY_VARIANTS}
    for _ in range(rounds):
        for question in LATENCY_QUESTIONS:
            for label, overrides in LATENCY_VARIANTS.items():
                if hasattr(embedder, "query_cache_clear"):
                    embedder.query_cache_clear()
                started = time.perf_counter()
                pipeline_retrieve(
                    AnswerRequest(question=question, pipeline="simple", mode="hybrid", k=10),
                    tenant=tenant,
                    overrides=overrides,
                )
                times[label].append((time.perf_counter() - started) * 1000)
    off = percentile(times["stages off"], 50)
    return {
        label: {
            "p50_ms": round(percentile(values, 50), 1),
            "p95_ms": round(percentile(values, 95), 1),
            "p50_over_off": round(percentile(values, 50) / off, 3),
        }
        for label, values in times.items()
    } | {"queries_per_variant": len(LATENCY_QUESTIONS) * rounds}


def mini_demo_build(slug: str) -> str:
    """The tenant ``slug`` holding ``MINI_DEMO`` (the demo's sources over part of Django's docs)."""
    from django.conf import settings

    from core.models import Tenant
    from core.services import tenant_create
    from demo.services import DOCS_URL, SOURCES, django_docs_download
    from knowledge.services import paths_ingest, source_get_or_create

    tenant = Tenant.objects.filter(slug=slug).first() or tenant_create(slug=slug, name="Demo subset")
    docs = django_docs_download(downloads=settings.KB_DATA_DIR / "downloads", log=log)
    for spec in SOURCES:
        source = source_get_or_create(tenant=tenant, name=spec.name, half_life_days=spec.half_life_days)
        report = paths_ingest(
            tenant=tenant,
            source=source,
            paths=[docs / path for path in MINI_DEMO[spec.name]],
            root=docs,
            fmt="rst",
            uri_prefix=DOCS_URL,
            exclude=["*_images/*"],
        )
        log(f"{slug} {spec.name}: {report.counts()}")
    return slug


def main() -> None:
    django_setup()
    parser = argparse.ArgumentParser()
    parser.add_argument("--datasets", nargs="*", default=["rag4p", "hotpotqa", "bioasq"], choices=list(DATASETS))
    parser.add_argument("--demo", default="demo", help="demo tenant slug ('' to skip)")
    parser.add_argument("--mini-demo", action="store_true", help="build and measure the MINI_DEMO tenant instead")
    parser.add_argument("--keep", action="store_true", help="keep the bench-* tenants for the next run")
    parser.add_argument("--latency", type=int, default=0, metavar="ROUNDS", help="also time the demo tenant")
    args = parser.parse_args()
    output = {}
    if args.mini_demo:
        args.demo = mini_demo_build("demo-subset")
    output["datasets"] = datasets_measure(args.datasets, keep=args.keep)
    if args.demo:
        output["demo"] = demo_measure(args.demo)
        if args.latency:
            output["demo"]["latency"] = latency_measure(args.demo, rounds=args.latency)
    print(json.dumps(output, indent=2))


if __name__ == "__main__":
    main()
