"""Near-duplicates on two releases of the Django docs: collapsing, the kept copy, pairs, the classifier.

Usage: python benchmarks/near_duplicates.py [--folders F ...] [--also-threshold T ...] [--pairs-file PATH] [--drop]

Downloads Django 4.2's and 5.2's source distributions with pip (``demo.services.django_docs_download``,
into ``$KB_DATA_DIR/downloads``) and ingests the chosen ``docs/`` folders of each release as its own
source (``django-4.2``, ``django-5.2``; document ids ``<release>/<path>``; ``published_at`` = the
release's date) into the tenant ``neardup-bench`` (kept for reruns: re-ingesting unchanged files
is free; ``--drop`` deletes it afterwards). Pages identical in both releases are exact duplicates
(stored once); the others are compared by ``near_duplicates_refresh``, timed apart from ingestion.

Prints one JSON object:

* ``corpus``: documents, chunks, exact duplicates, ingestion and near-duplicate seconds, and the
  near-duplicate step's share (``throughput_ratio``: ingestion chunks/s with the step over without);
* ``sweep``: for Jaccard thresholds 0.5 to 0.9, the pairs found (LSH + exact check) and their
  precision by an objective rule: a pair is right when both are the same page (same path) in the
  two releases; ``same_page_recall``: of the same-path page pairs whose exact Jaccard passes the
  threshold, the share found;
* ``retrieval``: over 50 questions (top 10, hybrid), pages appearing twice (both releases) in the
  top 10 without and with collapsing (and which pages stay doubled), and among collapsed results
  from a cluster, how often the kept copy is the newer release; at the default threshold
  (``KB_NEAR_DUPLICATE_THRESHOLD``, 0.5) and at each ``--also-threshold`` (default 0.8; the
  clusters are rebuilt, then set back to the default);
* ``classifier``: meaningful/meaningless counts over all pairs at the default threshold and over a
  sample of 30 pairs (seed 8), written with their diffs to ``--pairs-file`` for checking by hand.
"""

import argparse
import difflib
import json
import random
import sys
import time
from collections import Counter
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path

from _setup import django_setup
from _toolkit import percentile

RELEASES = (("4.2", "4.2.30", datetime(2023, 4, 3, tzinfo=UTC)), ("5.2", "5.2.19", datetime(2025, 4, 2, tzinfo=UTC)))
TENANT = "neardup-bench"
THRESHOLDS = (0.5, 0.6, 0.7, 0.8, 0.9)
SAMPLE = 30
BATCH = 8
SEED = 8

# 50 questions answered by the ingested folders (Django's how-to guides and FAQ).
QUESTIONS = [
    "How do I write a custom model field?",
    "How do I convert database values to Python objects in a custom field?",
    "How do I create a custom management command?",
    "How do I add arguments to a management command?",
    "How do I write a custom template tag?",
    "How do I write a simple_tag that takes arguments?",
    "How do I write a custom template filter?",
    "How do I write a custom lookup?",
    "How do I register a transform on a field?",
    "How do I write a custom storage class?",
    "How do I write a data migration?",
    "How do I add a unique non-nullable field to a table with rows?",
    "How do I migrate from a ManyToManyField to a through model?",
    "How do I deploy with ASGI?",
    "How do I deploy with Daphne or Uvicorn?",
    "How do I deploy with WSGI and Gunicorn?",
    "How do I deploy Django with Apache and mod_wsgi?",
    "What should I check before deploying to production?",
    "How do I serve static files in production?",
    "How do I manage static files like images and CSS?",
    "How do I configure logging?",
    "How are errors reported by email to admins?",
    "How do I filter sensitive information from error reports?",
    "How do I output CSV from a view?",
    "How do I stream a large CSV file?",
    "How do I generate a PDF with ReportLab?",
    "How do I override a template of a third-party app?",
    "How do I provide initial data with fixtures?",
    "How do I integrate Django with a legacy database?",
    "How do I upgrade Django to a newer version?",
    "How do I install Django on Windows?",
    "How do I authenticate users with REMOTE_USER?",
    "How do I use CSRF protection with AJAX?",
    "How do I delete an app from a project?",
    "How do I customize the shell's automatic imports?",
    "How do I write a custom template backend?",
    "Which Python versions does Django support?",
    "Which databases does Django support?",
    "How do I get help with Django?",
    "Why is my Django admin missing CSS?",
    "How can I see the raw SQL queries Django is running?",
    "Can I use Django with a pre-existing database?",
    "How do I add a field to a model without losing data?",
    "How do I contribute code to Django?",
    "Is Django stable and used in production?",
    "How do I make the admin prepopulate a field?",
    "What does 'No module named' mean when running django-admin?",
    "Do I have to use the Django ORM?",
    "How do I reset the database sequence?",
    "How do I pronounce Django?",
]


def main() -> None:
    django_setup()
    from django.conf import settings

    parser = argparse.ArgumentParser()
    parser.add_argument(
        "--folders",
        nargs="+",
        default=["howto", "faq", "intro", "misc", "topics/http"],
        help="folders of docs/ to ingest",
    )
    parser.add_argument("--pairs-file", type=Path, default=Path("benchmarks/results/near_duplicates_pairs.md"))
    parser.add_argument("--drop", action="store_true", help="delete the benchmark tenant afterwards")
    parser.add_argument(
        "--also-threshold", type=float, nargs="*", default=[0.8], help="retrieval also measured at these thresholds"
    )
    args = parser.parse_args()
    settings.KB_NEAR_DUPLICATES = False  # the step runs below, timed apart from ingestion
    report = run(args, settings)
    print(json.dumps(report, indent=2))


def ingest(tenant, args, settings) -> dict:
    from demo.services import django_docs_download
    from knowledge.ingestion.readers import read_path
    from knowledge.services import collect_files, documents_ingest, source_get_or_create

    totals = {"documents": 0, "chunks_created": 0, "exact_duplicates_stored": 0, "ingest_seconds": 0.0}
    for release, version, published in RELEASES:
        docs = django_docs_download(downloads=settings.KB_DATA_DIR / "downloads", version=version)
        files = collect_files([docs / folder for folder in args.folders], root=docs, exclude=["*_images/*"])
        documents = [
            replace(d, external_id=f"{release}/{d.external_id}", published_at=published)
            for f, root in files
            for d in read_path(f, root=root, uri_prefix=f"https://docs.djangoproject.com/en/{release}/", fmt="rst")
        ]
        source = source_get_or_create(tenant=tenant, name=f"django-{release}")
        # Batches of documents, so an interrupted run keeps what it stored (reruns skip it).
        for i in range(0, len(documents), BATCH):
            started = time.perf_counter()
            counts = documents_ingest(tenant=tenant, source=source, documents=documents[i : i + BATCH]).counts()
            totals["ingest_seconds"] += time.perf_counter() - started
            totals["chunks_created"] += counts["chunks"]
            totals["exact_duplicates_stored"] += counts["duplicate"]
            print(f"{release} {i + BATCH}/{len(documents)}: {counts}", file=sys.stderr, flush=True)
        totals["documents"] += len(documents)
    return totals


def run(args, settings) -> dict:
    from core.models import Tenant
    from core.services import tenant_create
    from knowledge.dedup.near import candidate_pairs, jaccard, shingles
    from knowledge.dedup.services import near_duplicates_refresh
    from knowledge.models import Chunk, DocumentVersion
    from knowledge.models.dedup import NearDuplicatePair

    tenant = Tenant.objects.filter(slug=TENANT).first() or tenant_create(slug=TENANT, name="Near-duplicates bench")
    try:
        corpus = ingest(tenant, args, settings)
        started = time.perf_counter()
        default = settings.KB_NEAR_DUPLICATE_THRESHOLD
        step = near_duplicates_refresh(tenant_id=tenant.pk, threshold=default, rebuild=True)
        corpus["near_duplicates_seconds"] = round(time.perf_counter() - started, 3)
        corpus["near_duplicates_step"] = step
        corpus["chunks"] = Chunk.objects.for_tenant(tenant).count()
        current = DocumentVersion.objects.for_tenant(tenant).filter(is_current=True)
        corpus["exact_duplicates"] = current.filter(duplicate_of__isnull=False).count()
        if corpus["chunks_created"]:
            # Ingestion as documents_ingest runs it with the task (eager): ingest time + step time.
            corpus["throughput_ratio"] = round(
                corpus["ingest_seconds"] / (corpus["ingest_seconds"] + corpus["near_duplicates_seconds"]), 4
            )
        corpus["ingest_seconds"] = round(corpus["ingest_seconds"], 2)

        sweep = threshold_sweep(tenant, current, candidate_pairs, jaccard, shingles)
        classifier = classifier_check(tenant, NearDuplicatePair, args.pairs_file, threshold=default)
        retrieval = {str(default): retrieval_check(tenant)}
        for threshold in args.also_threshold:
            near_duplicates_refresh(tenant_id=tenant.pk, threshold=threshold, rebuild=True)
            retrieval[str(threshold)] = retrieval_check(tenant)
        if args.also_threshold:
            near_duplicates_refresh(tenant_id=tenant.pk, threshold=default, rebuild=True)  # back to the default
    finally:
        if args.drop:
            Tenant.objects.filter(pk=tenant.pk).delete()
    return {"corpus": corpus, "sweep": sweep, "retrieval": retrieval, "classifier": classifier}


def _page(external_id: str) -> str:
    return external_id.split("/", 1)[1]


def threshold_sweep(tenant, current, candidate_pairs, jaccard, shingles) -> dict:
    from knowledge.dedup.near import signature_from_bytes
    from knowledge.models.dedup import MinHashSignature

    rows = list(current.filter(duplicate_of__isnull=True).values_list("id", "document__external_id", "text"))
    ids = {pk: external_id for pk, external_id, _ in rows}
    sets = {pk: shingles(text) for pk, _, text in rows}
    signatures = {
        v: signature_from_bytes(h)
        for v, h in MinHashSignature.objects.for_tenant(tenant)
        .filter(version_id__in=ids)
        .values_list("version_id", "hashvalues")
    }
    # Same page in both releases (both hold chunks): the objective "right pair" rule.
    by_page: dict[str, dict[str, int]] = {}
    for pk, external_id in ids.items():
        by_page.setdefault(_page(external_id), {})[external_id.split("/", 1)[0]] = pk
    same_page = {tuple(sorted(p.values())) for p in by_page.values() if len(p) == 2}
    same_page_jaccard = {pair: jaccard(sets[pair[0]], sets[pair[1]]) for pair in same_page}
    result = {}
    for threshold in THRESHOLDS:
        started = time.perf_counter()
        candidates = candidate_pairs(signatures, new=list(signatures), threshold=threshold)
        found = {pair for pair in candidates if jaccard(sets[pair[0]], sets[pair[1]]) >= threshold}
        seconds = time.perf_counter() - started
        right = sum(1 for a, b in found if _page(ids[a]) == _page(ids[b]) and ids[a] != ids[b])
        eligible = {pair for pair, j in same_page_jaccard.items() if j >= threshold}
        result[str(threshold)] = {
            "lsh_candidates": len(candidates),
            "pairs": len(found),
            "same_page_pairs": right,
            "precision": round(right / len(found), 4) if found else None,
            "same_page_eligible": len(eligible),
            "same_page_recall": round(len(found & eligible) / len(eligible), 4) if eligible else None,
            "seconds": round(seconds, 3),
        }
    result["same_page_pairs_total"] = len(same_page)
    return result


def retrieval_check(tenant) -> dict:
    from retrieval.request import AnswerRequest
    from retrieval.search import chunk_search

    twice = {"off": 0, "on": 0}
    questions_with_twice = {"off": 0, "on": 0}
    kept_newer = kept_older = 0
    exact = {"newer": 0, "older": 0}
    twice_pages: Counter = Counter()
    latency = {"off": [], "on": []}
    from knowledge.embedders import get_embedder

    embedder = get_embedder(tenant.embedder)
    for n, question in enumerate(QUESTIONS):
        order = (("off", False), ("on", True))
        for label, collapse in order if n % 2 == 0 else order[::-1]:  # interleaved, alternating who goes first
            if hasattr(embedder, "query_cache_clear"):
                embedder.query_cache_clear()  # each search embeds its query, as a new question would
            response = chunk_search(AnswerRequest(question=question, k=10, collapse=collapse), tenant=tenant)
            latency[label].append(response.timings_ms["total_ms"])
            releases_by_page: dict[str, set[str]] = {}
            for r in response.results:
                external_id = r.chunk.version.document.external_id
                releases_by_page.setdefault(_page(external_id), set()).add(external_id.split("/", 1)[0])
            doubled = sum(1 for releases in releases_by_page.values() if len(releases) > 1)
            if collapse:
                twice_pages.update(page for page, releases in releases_by_page.items() if len(releases) > 1)
            twice[label] += doubled
            questions_with_twice[label] += bool(doubled)
            if collapse:
                for r in response.results:
                    if r.also_in:
                        shown = r.chunk.version.published_at.isoformat()
                        newer = all(shown >= (p["published_at"] or "") for p in r.also_in)
                        exact[("newer" if newer else "older")] += 1
                    if r.near_duplicates:
                        shown = r.chunk.version.published_at
                        others = [d["published_at"] for d in r.near_duplicates if d["published_at"]]
                        if all(shown.isoformat() >= other for other in others):
                            kept_newer += 1
                        else:
                            kept_older += 1

    p50s = {label: round(percentile(values, 50), 2) for label, values in latency.items()}
    return {
        "questions": len(QUESTIONS),
        "k": 10,
        "pages_twice_in_top10": twice,
        "questions_with_a_page_twice": questions_with_twice,
        "pages_twice_when_collapsed": dict(twice_pages.most_common()),
        "collapsed_results_kept_newer": kept_newer,
        "collapsed_results_kept_older": kept_older,
        "exact_duplicate_results_shown_at": exact,
        # Off and on take turns on each question (interleaved), so the ratio holds under load.
        "search_p50_ms": p50s,
        "search_p50_on_over_off": round(p50s["on"] / p50s["off"], 3) if p50s["off"] else None,
    }


def classifier_check(tenant, NearDuplicatePair, pairs_file: Path, *, threshold: float) -> dict:
    from knowledge.dedup.near import change_summary

    pairs = list(
        NearDuplicatePair.objects.for_tenant(tenant).select_related("older__document", "newer__document").order_by("pk")
    )
    counts = {"meaningful": 0, "meaningless": 0}
    for pair in pairs:
        counts[pair.kind] += 1
    sample = random.Random(SEED).sample(pairs, min(SAMPLE, len(pairs)))
    sample_counts = {"meaningful": 0, "meaningless": 0}
    lines = [
        "# Near-duplicate pairs to check by hand (benchmarks/near_duplicates.py)",
        "",
        f"{len(sample)} pairs sampled (seed {SEED}) of {len(pairs)} at Jaccard >= {threshold} on the Django 4.2/5.2 docs.",
        "For each: is the classifier's kind right (meaningless = equal after normalizing case, whitespace,",
        "punctuation and markup; meaningful = a real edit), and does `update` summarize the change?",
        "",
    ]
    for n, pair in enumerate(sample, 1):
        sample_counts[pair.kind] += 1
        older, newer = pair.older, pair.newer
        diff = [
            line
            for line in difflib.unified_diff(older.text.splitlines(), newer.text.splitlines(), lineterm="", n=0)
            if line[:1] in "+-" and not line.startswith(("+++", "---"))
        ]
        lines += [
            f"## {n}. {older.document.external_id} -> {newer.document.external_id}",
            "",
            f"- Jaccard {pair.jaccard:.3f}; classifier: **{pair.kind}**; update: `{pair.update or '-'}`",
            f"- first changes (word level): `{change_summary(older.text, newer.text, limit=6) or '-'}`",
            "- verdict: [ ] right  [ ] wrong",
            "",
            "```diff",
            *[line[:200] for line in diff[:12]],
            *([f"... ({len(diff) - 12} more changed lines)"] if len(diff) > 12 else []),
            "```",
            "",
        ]
    pairs_file.parent.mkdir(parents=True, exist_ok=True)
    pairs_file.write_text("\n".join(lines), encoding="utf-8")
    return {"pairs": len(pairs), "all": counts, "sample": sample_counts, "sample_file": str(pairs_file)}


if __name__ == "__main__":
    main()
