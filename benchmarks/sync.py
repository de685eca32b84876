"""Sync figures: an unchanged re-sync of the demo's 625 documents, one changed and one removed
document, and a 200-page local web site.

Usage: python benchmarks/sync.py [--pages 200] [--skip-demo] [--documents 200] [--queries-only]
Prints one JSON object:

* ``demo_resync``: the demo tenant's five folder sources synced again with nothing changed (the
  demo is set up first if missing, which embeds the docs once): seconds, counts and the chunks
  embedded (must be 0); ``demo_resync_cold`` the same after the stored fingerprints are cleared
  (every file read and hashed, still nothing embedded), as after upgrading from sources filled by
  ``manage.py ingest``.
* ``changed``: a folder source over a copy of Django's 5.x release notes; one file gets a new
  paragraph, and one sync later a search for that paragraph finds it in the new, current
  version (its rank among the top 10, and the version number).
* ``removed``: one release note removed; one sync later it is absent from current results and an
  ``as_of`` search for the day before the deletion still finds it (its ``published_at`` is its
  release date).
* ``web``: a local HTTP server with ``--pages`` pages and a sitemap (ETags): the first sync and a
  second one where every page answers 304.
* ``folder_queries``: a granted folder of ``--documents`` Markdown files and one JSONL file of as
  many rows, synced once; then the database statements and seconds of three more syncs: nothing
  changed, half the files removed, and the JSONL file cut to one row (``statements`` all of them,
  ``document_reads`` those that read the source's live documents). ``--queries-only`` runs this
  alone (no downloads, no demo).
"""

import argparse
import json
import shutil
import sys
import tempfile
import time
from datetime import timedelta
from pathlib import Path

from _setup import ROOT, django_setup

RELEASES = "5.*.txt"  # Django 5.x release notes, dated
PHRASE = "The quokka migration flag keeps zanzibar tables intact during a squash."


def _counts(run) -> dict:
    return {
        **run.counts(),
        "status": run.status,
        "seconds": round((run.finished_at - run.started_at).total_seconds(), 2),
    }


def _chunks(tenant) -> int:
    from knowledge.models import Chunk

    return Chunk.objects.filter(tenant=tenant).count()


def demo_resync() -> dict:
    from django.conf import settings

    from demo.services import demo_setup
    from knowledge.models import Document, Source
    from knowledge.services.sync import source_sync

    setup = demo_setup(downloads=settings.KB_DATA_DIR / "downloads")
    tenant = setup.tenant
    sources = list(Source.objects.filter(tenant=tenant).order_by("name"))
    result = {}
    for label, clear in (("demo_resync", False), ("demo_resync_cold", True)):
        if clear:
            Document.objects.filter(tenant=tenant).update(fingerprint="")
        chunks = _chunks(tenant)
        started = time.perf_counter()
        runs = [source_sync(source=s) for s in sources]
        seconds = time.perf_counter() - started
        totals = {k: sum(r.counts()[k] for r in runs) for k in ("new", "updated", "unchanged", "deleted", "failed")}
        result[label] = {
            "seconds": round(seconds, 2),
            **totals,
            "chunks_embedded": _chunks(tenant) - chunks,
            "per_source_s": {r.source.name: _counts(r)["seconds"] for r in runs},
        }
    return result


def changed_and_removed(docs: Path) -> dict:
    from django.utils import timezone

    from core.models import Tenant
    from core.services import tenant_create
    from knowledge.models import Document
    from knowledge.services.sources import source_create
    from knowledge.services.sync import source_sync
    from retrieval.request import AnswerRequest
    from retrieval.search import chunk_search

    Tenant.objects.filter(slug="sync-bench").delete()
    tenant = tenant_create(slug="sync-bench", name="Sync benchmark")
    folder = Path(tempfile.mkdtemp(prefix="sync-bench-"))
    try:
        for file in sorted((docs / "releases").glob(RELEASES)):
            shutil.copy(file, folder / file.name)
        source = source_create(tenant=tenant, name="releases", kind="folder", location=str(folder), text_format="rst")
        first = source_sync(source=source)
        target = folder / "5.2.txt"
        target.write_text(target.read_text() + f"\n\n{PHRASE}\n")
        changed = source_sync(source=source)
        hits = chunk_search(AnswerRequest(question=PHRASE, k=10), tenant=tenant).results
        ranks = [r.rank for r in hits if r.chunk.version.document.external_id == "5.2" and PHRASE in r.chunk.text]
        found = next(r.chunk.version for r in hits if r.rank == ranks[0]) if ranks else None

        gone = folder / "5.0.txt"
        title_query = "Django 5.0 release notes"
        gone.unlink()
        removed = source_sync(source=source)
        document = Document.objects.get(tenant=tenant, external_id="5.0")
        current = [
            r.chunk.version.document.external_id
            for r in chunk_search(AnswerRequest(question=title_query, k=10), tenant=tenant).results
        ]
        day_before = (document.deleted_at - timedelta(days=1)).date()
        before = [
            r.chunk.version.document.external_id
            for r in chunk_search(AnswerRequest(question=title_query, k=10, as_of=day_before), tenant=tenant).results
        ]
        return {
            "changed": {
                "documents": first.new,
                "first_sync": _counts(first),
                "sync": _counts(changed),
                "searchable_after_one_sync": bool(found and found.is_current),
                "rank_of_new_text": ranks[0] if ranks else None,
                "version_found": found.number if found else None,
            },
            "removed": {
                "sync": _counts(removed),
                "deleted_at": document.deleted_at.isoformat(),
                "in_current_top10": "5.0" in current,
                "as_of": day_before.isoformat(),
                "in_as_of_top10": "5.0" in before,
                "as_of_rank": before.index("5.0") + 1 if "5.0" in before else None,
                "checked_at": timezone.now().isoformat(),
            },
        }
    finally:
        shutil.rmtree(folder, ignore_errors=True)
        Tenant.objects.filter(slug="sync-bench").delete()


def web(pages: int) -> dict:
    sys.path.insert(0, str(ROOT))
    from core.models import Tenant
    from core.services import tenant_create
    from knowledge.services.sources import source_create
    from knowledge.services.sync import source_sync
    from tests.knowledge.web_site import WebSite, site_pages

    Tenant.objects.filter(slug="sync-bench-web").delete()
    tenant = tenant_create(slug="sync-bench-web", name="Sync benchmark (web)")
    try:
        with WebSite({}) as site:
            site.pages.update(site_pages(pages, base=site.url("")))
            source = source_create(
                tenant=tenant,
                name="site",
                kind="web",
                location=site.url("/docs/sitemap.xml"),
                crawl_delay_s=0,
                page_limit=pages + 10,
            )
            first = source_sync(source=source)
            requests_before = sum(site.hits.values())
            second = source_sync(source=source)
            return {
                "pages": pages,
                "first_sync": _counts(first),
                "second_sync": _counts(second),
                "second_sync_requests": sum(site.hits.values()) - requests_before,
            }
    finally:
        Tenant.objects.filter(slug="sync-bench-web").delete()


def _source_document_reads(queries: list[dict]) -> int:
    """How many of ``queries`` read a source's live documents (all of them, not some ids)."""
    return sum(
        1
        for q in queries
        if q["sql"].startswith("SELECT")
        and 'FROM "knowledge_document"' in q["sql"]
        and '"knowledge_document"."source_id" =' in q["sql"]
        and '"knowledge_document"."deleted_at" IS NULL' in q["sql"]
        and '"knowledge_document"."id" IN' not in q["sql"]
    )


def folder_queries(documents: int) -> dict:
    import tempfile

    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from core.models import Tenant
    from core.services import tenant_create
    from knowledge.folder_grants import folder_grant_add
    from knowledge.services.sources import source_create
    from knowledge.services.sync import source_sync

    Tenant.objects.filter(slug="sync-bench-queries").delete()
    tenant = tenant_create(slug="sync-bench-queries", name="Sync benchmark (queries)")
    folder = Path(tempfile.mkdtemp(prefix="sync-queries-"))
    rows = folder / "rows.jsonl"
    try:
        for n in range(documents):
            (folder / f"page-{n:04d}.md").write_text(f"# Page {n}\n\nPage {n} tells of the number {n * 7919}.\n")
        rows.write_text(
            "".join(json.dumps({"id": f"row-{n}", "text": f"Row {n}: {n * 104729}."}) + "\n" for n in range(documents))
        )
        folder_grant_add(tenant=tenant, path=folder, granted_by="benchmarks/sync.py")
        source = source_create(tenant=tenant, name="pages", kind="folder", location=str(folder))
        first = source_sync(source=source)

        def measured(change) -> dict:
            change()
            with CaptureQueriesContext(connection) as queries:
                started = time.perf_counter()
                run = source_sync(source=source)
                seconds = time.perf_counter() - started
            return {
                **{k: v for k, v in run.counts().items() if v},
                "statements": len(queries.captured_queries),
                "document_reads": _source_document_reads(queries.captured_queries),
                "seconds": round(seconds, 2),
            }

        def remove_half() -> None:
            for n in range(0, documents, 2):
                (folder / f"page-{n:04d}.md").unlink()

        def cut_rows() -> None:
            rows.write_text(json.dumps({"id": "row-0", "text": "Row 0: 0."}) + "\n")

        return {
            "documents": first.new,
            "unchanged": measured(lambda: None),
            "half_removed": measured(remove_half),
            "jsonl_cut_to_one_row": measured(cut_rows),
        }
    finally:
        shutil.rmtree(folder, ignore_errors=True)
        Tenant.objects.filter(slug="sync-bench-queries").delete()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--pages", type=int, default=200)
    parser.add_argument("--skip-demo", action="store_true", help="leave out the demo re-sync")
    parser.add_argument("--documents", type=int, default=200, help="files (and JSONL rows) of folder_queries")
    parser.add_argument("--queries-only", action="store_true", help="run folder_queries alone")
    args = parser.parse_args()
    django_setup()
    import os

    from django.conf import settings
    from django.core.management import call_command

    from demo.services import django_docs_download

    call_command("migrate", verbosity=0)
    out: dict = {"machine": f"{os.cpu_count()} cores"}
    if args.queries_only:
        out["folder_queries"] = folder_queries(args.documents)
        print(json.dumps(out, indent=2))
        return
    if not args.skip_demo:
        out.update(demo_resync())
    docs = django_docs_download(downloads=settings.KB_DATA_DIR / "downloads")
    out.update(changed_and_removed(docs))
    out["web"] = web(args.pages)
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
