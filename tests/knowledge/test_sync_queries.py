"""The database work of a sync, counted: the source's documents read once a run, deletions in a
few statements whatever their number, the tenant's members read once a run, and a "test
connection" of a file source that walks nothing."""

from __future__ import annotations

import json

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from core.outbound import AddressNotAllowed
from knowledge.connectors.base import Permission, SourceUnreachable
from knowledge.connectors.folder import FolderConnector
from knowledge.connectors.git import GitConnector
from knowledge.connectors.web import WebConnector
from knowledge.models import Chunk, Document, DocumentVersion, Source
from knowledge.selectors import document_list
from knowledge.services import sync_runner
from knowledge.services.sources import source_create
from knowledge.services.sync import source_sync
from tests.connectors.helpers import member
from tests.connectors.scripted import scripted_service
from tests.factories import folder_granted
from tests.knowledge.web_site import WebSite, site_pages

pytestmark = pytest.mark.django_db


def source_document_reads(queries) -> int:
    """How many statements read the source's live documents (all of them, not a list of ids)."""
    return sum(
        1
        for q in queries
        if q["sql"].startswith("SELECT")
        and 'FROM "knowledge_document"' in q["sql"]
        and '"knowledge_document"."source_id" =' in q["sql"]
        and '"knowledge_document"."deleted_at" IS NULL' in q["sql"]
        and '"knowledge_document"."id" IN' not in q["sql"]
    )


def synced(source, **kwargs):
    """(run, captured statements) of one sync of ``source``."""
    with CaptureQueriesContext(connection) as queries:
        run = source_sync(source=source, **kwargs)
    return run, queries.captured_queries


def deleting(queries) -> list:
    """The statements that mark documents deleted: the documents, their versions, their chunks."""
    return [
        q
        for q in queries
        if q["sql"].startswith(('UPDATE "knowledge_document" SET "deleted_at"', 'UPDATE "knowledge_documentversion"'))
        or q["sql"].startswith('UPDATE "knowledge_chunk" SET "is_current" = false')
    ]


def rows(count: int) -> str:
    return "".join(
        json.dumps({"id": f"row-{n}", "text": f"Row {n} holds the number {n * 7919}."}) + "\n" for n in range(count)
    )


def test_a_sync_of_200_unchanged_documents_reads_the_sources_documents_once(tenant, tmp_path):
    folder = folder_granted(tenant, tmp_path / "pages")
    for n in range(200):
        (folder / f"page-{n:03d}.md").write_text(f"# Page {n}\n\nPage {n} tells of the number {n * 104729}.\n")
    source = source_create(tenant=tenant, name="pages", kind="folder", location=str(folder))
    assert source_sync(source=source).new == 200

    run, queries = synced(source)

    assert run.counts() == {"new": 0, "updated": 0, "unchanged": 200, "deleted": 0, "failed": 0}
    assert source_document_reads(queries) == 1
    assert len(queries) <= 20


def test_rows_gone_from_a_jsonl_file_are_deleted_in_as_many_statements_for_40_as_for_4(tenant, tmp_path):
    folder = folder_granted(tenant, tmp_path / "rows")
    (folder / "rows.jsonl").write_text(rows(50))
    source = source_create(tenant=tenant, name="rows", kind="folder", location=str(folder))
    source_sync(source=source)
    versions = DocumentVersion.objects.for_tenant(tenant).count()

    (folder / "rows.jsonl").write_text(rows(46))
    four, four_queries = synced(source)
    (folder / "rows.jsonl").write_text(rows(6))
    forty, forty_queries = synced(source)

    assert (four.deleted, forty.deleted) == (4, 40)
    assert len(deleting(forty_queries)) == len(deleting(four_queries)) == 3
    assert source_document_reads(forty_queries) == 1
    gone = Document.objects.for_tenant(tenant).filter(external_id__in=[f"row-{n}" for n in range(6, 50)])
    assert gone.count() == 44 and not gone.filter(deleted_at__isnull=True).exists()
    assert DocumentVersion.objects.for_tenant(tenant).count() == versions  # kept for as_of searches
    assert not Chunk.objects.for_tenant(tenant).filter(version__document__in=gone, is_current=True).exists()
    assert sorted(document_list(tenant=tenant).values_list("external_id", flat=True)) == [f"row-{n}" for n in range(6)]


def test_a_service_sync_of_three_batches_reads_the_tenants_members_and_groups_once(tenant, monkeypatch, settings):
    service = scripted_service(monkeypatch)
    settings.KB_FETCH_ALLOWED_NETWORKS = ["127.0.0.1/32"]
    source = source_create(tenant=tenant, name="team", kind="slack", location="http://127.0.0.1:9/", secret="xoxb")
    member(tenant, "ann@example.com")
    service.group("C1", "slack:#plans", ["ann@example.com"])
    source_sync(source=source)
    monkeypatch.setattr(sync_runner, "BATCH_DOCUMENTS", 2)
    for n in range(6):
        service.put(
            f"plans/{n}", f"Plan {n}", f"Plan {n} is to paint the shed {n} times.", Permission.of(groups=["C1"])
        )

    run, queries = synced(source, scope="content")

    assert run.new == 6
    member_reads = [q for q in queries if q["sql"].startswith('SELECT LOWER("auth_user"."email")')]
    group_reads = [q for q in queries if q["sql"].startswith('SELECT "knowledge_sourcepermissiongroup"')]
    assert (len(member_reads), len(group_reads)) == (1, 1)
    restricted = Document.objects.for_tenant(tenant).filter(external_id__startswith="scripted/plans/")
    assert {rule.group.name for d in restricted for rule in d.access_rules.all() if rule.group} >= {"slack:#plans"}


def test_testing_a_folder_source_walks_nothing(tenant, tmp_path, monkeypatch):
    folder = folder_granted(tenant, tmp_path / "docs")
    (folder / "a.md").write_text("# A\n\nText.")
    source = source_create(tenant=tenant, name="docs", kind="folder", location=str(folder))
    monkeypatch.setattr(FolderConnector, "_files", lambda self: pytest.fail("the folder was walked"))

    assert FolderConnector(source).check().startswith(f"{folder}: a granted folder the workers can read")


def test_testing_a_folder_that_is_not_granted_is_refused(tenant, tmp_path):
    folder = tmp_path / "private"
    folder.mkdir()
    source = Source(tenant=tenant, name="private", kind="folder", location=str(folder))

    with pytest.raises(SourceUnreachable) as refused:
        FolderConnector(source).check()
    assert refused.value.code == "location_not_allowed"


def test_testing_a_web_source_reads_robots_txt_and_the_start_page_only(tenant, settings):
    settings.KB_FETCH_ALLOWED_NETWORKS = ["127.0.0.1/32"]
    with WebSite({}) as site:
        site.pages.update(site_pages(30, base=site.url("")))
        source = Source(tenant=tenant, name="site", kind="web", location=site.url("/docs/sitemap.xml"), crawl_delay_s=0)

        line = WebConnector(source, sleep=lambda s: None).check()

        assert line.startswith(f"{site.url('/docs/sitemap.xml')} answered 200")
        assert sum(site.hits.values()) == 2  # robots.txt and the sitemap


def test_testing_a_web_or_git_source_on_a_private_address_is_refused(tenant, settings):
    settings.KB_FETCH_ALLOWED_NETWORKS = []
    web = Source(tenant=tenant, name="site", kind="web", location="http://127.0.0.1:9/docs/", crawl_delay_s=0)
    git = Source(tenant=tenant, name="repo", kind="git", location="http://127.0.0.1:9/repo.git")

    with pytest.raises(SourceUnreachable, match="127.0.0.1"):
        WebConnector(web, sleep=lambda s: None).check()
    with pytest.raises(SourceUnreachable) as refused:
        GitConnector(git).check()
    assert refused.value.code == AddressNotAllowed.code
