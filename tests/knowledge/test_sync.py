"""Syncing connector sources: a folder changed between syncs, deletions kept for as_of, failures
that stay local, one run per source at a time, the schedule, and the CLI."""

import json
from datetime import timedelta

import pytest
from django.core.management import CommandError, call_command
from django.utils import timezone

from core.errors import InvalidInput
from knowledge.connectors import folder as folder_connector
from knowledge.models import Document, DocumentVersion, Source, SyncRun
from knowledge.selectors import document_list, source_overview
from knowledge.services import sync_runner
from knowledge.services.sources import source_create
from knowledge.services.sync import source_sync, sources_sync_due, sync_run_request
from knowledge.services.sync_batches import sync_progress
from retrieval.request import AnswerRequest
from retrieval.search import chunk_search
from tests.factories import folder_granted

PAGES = {
    "guide/boiling.md": "# Boiling eggs\n\nPut the eggs in boiling water for seven minutes, then cool them in ice water.",
    "guide/bread.md": "# Baking bread\n\nKnead the dough for ten minutes and let it rise for an hour before baking.",
    "notes/tea.md": "# Green tea\n\nBrew green tea at eighty degrees for two minutes; hotter water makes it bitter.",
}


def write(folder, pages):
    for name, text in pages.items():
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_text(text)


@pytest.fixture
def docs(tmp_path, tenant):
    """A folder of three pages, granted to ``tenant``."""
    folder = tmp_path / "docs"
    write(folder, PAGES)
    return folder_granted(tenant, folder)


@pytest.fixture
def folder_source(tenant, docs):
    return source_create(tenant=tenant, name="kitchen", kind="folder", location=str(docs))


def live_ids(tenant):
    return sorted(document_list(tenant=tenant).values_list("external_id", flat=True))


def test_a_first_sync_reads_every_file_of_the_folder(tenant, folder_source):
    run = source_sync(source=folder_source)

    assert run.status == "done" and run.counts() == {"new": 3, "updated": 0, "unchanged": 0, "deleted": 0, "failed": 0}
    assert live_ids(tenant) == ["guide/boiling", "guide/bread", "notes/tea"]
    folder_source.refresh_from_db()
    assert folder_source.last_synced_at == run.finished_at


def test_a_second_sync_of_an_untouched_folder_reads_nothing_and_finds_nothing_new(tenant, folder_source, monkeypatch):
    source_sync(source=folder_source)
    reads = []
    real_read = folder_connector.read_bytes
    monkeypatch.setattr(folder_connector, "read_bytes", lambda *a, **k: reads.append(a) or real_read(*a, **k))

    run = source_sync(source=folder_source)

    assert run.counts() == {"new": 0, "updated": 0, "unchanged": 3, "deleted": 0, "failed": 0}
    assert reads == []
    assert DocumentVersion.objects.for_tenant(tenant).count() == 3


def test_a_touched_but_equal_file_is_read_but_not_stored_again(tenant, folder_source, docs):
    source_sync(source=folder_source)
    (docs / "notes/tea.md").write_text(PAGES["notes/tea.md"])  # same text, new mtime

    run = source_sync(source=folder_source)

    assert run.counts()["unchanged"] == 3 and run.counts()["updated"] == 0
    assert DocumentVersion.objects.for_tenant(tenant).count() == 3


def test_a_changed_file_becomes_a_new_version_searchable_after_one_sync(tenant, folder_source, docs):
    source_sync(source=folder_source)
    (docs / "notes/tea.md").write_text("# Green tea\n\nSteep matcha with a bamboo whisk until it foams.")

    run = source_sync(source=folder_source)

    assert run.counts() == {"new": 0, "updated": 1, "unchanged": 2, "deleted": 0, "failed": 0}
    top = chunk_search(AnswerRequest(question="bamboo whisk matcha", k=1), tenant=tenant).results[0]
    assert top.chunk.version.document.external_id == "notes/tea" and top.chunk.version.number == 2


def test_a_removed_file_leaves_current_results_and_counts_but_as_of_before_still_finds_it(tenant, folder_source, docs):
    source_sync(source=folder_source)
    # The bread page was ingested three days ago.
    DocumentVersion.objects.filter(document__external_id="guide/bread").update(
        ingested_at=timezone.now() - timedelta(days=3)
    )
    (docs / "guide/bread.md").unlink()

    run = source_sync(source=folder_source)

    assert run.counts()["deleted"] == 1
    bread = Document.objects.get(tenant=tenant, external_id="guide/bread")
    assert bread.deleted_at is not None and not bread.versions.filter(is_current=True).exists()
    assert live_ids(tenant) == ["guide/boiling", "notes/tea"]
    assert source_overview(tenant=tenant).get(pk=folder_source.pk).document_count == 2
    found = {
        r.chunk.version.document.external_id
        for r in chunk_search(AnswerRequest(question="knead dough", k=3), tenant=tenant).results
    }
    assert "guide/bread" not in found
    yesterday = (timezone.now() - timedelta(days=1)).date()
    before = chunk_search(AnswerRequest(question="knead dough", k=3, as_of=yesterday), tenant=tenant).results
    assert before and before[0].chunk.version.document.external_id == "guide/bread"
    today = chunk_search(AnswerRequest(question="knead dough", k=3, as_of=timezone.now().date()), tenant=tenant).results
    assert "guide/bread" not in {r.chunk.version.document.external_id for r in today}


def test_a_file_that_comes_back_is_current_again_with_a_new_version(tenant, folder_source, docs):
    source_sync(source=folder_source)
    (docs / "guide/bread.md").unlink()
    source_sync(source=folder_source)
    write(docs, {"guide/bread.md": PAGES["guide/bread.md"]})

    run = source_sync(source=folder_source)

    assert run.counts()["deleted"] == 0 and run.counts()["new"] + run.counts()["updated"] == 1
    bread = Document.objects.get(tenant=tenant, external_id="guide/bread")
    assert bread.deleted_at is None
    assert bread.versions.get(is_current=True).number == 2


def test_a_file_that_cannot_be_read_fails_alone_and_keeps_its_last_good_version(tenant, folder_source, docs):
    source_sync(source=folder_source)
    (docs / "notes/tea.md").write_bytes(b"\x89PNG\x00\x01binary\x00" * 20)
    (docs / "guide/boiling.md").write_text("# Boiling eggs\n\nSoft eggs need six minutes.")

    run = source_sync(source=folder_source)

    assert run.status == "done"
    assert run.counts() == {"new": 0, "updated": 1, "unchanged": 1, "deleted": 0, "failed": 1}
    assert run.errors[0]["document"] == "notes/tea.md" and "binary" in run.errors[0]["error"]
    tea = Document.objects.get(tenant=tenant, external_id="notes/tea")
    assert tea.deleted_at is None and tea.versions.get(is_current=True).number == 1


def test_a_missing_folder_fails_the_run_and_changes_nothing(tenant, folder_source, docs, tmp_path):
    source_sync(source=folder_source)
    docs.rename(tmp_path / "moved")

    run = source_sync(source=folder_source)

    assert run.status == "failed" and "no such folder" in run.error and "Nothing changed" in run.error
    assert live_ids(tenant) == ["guide/boiling", "guide/bread", "notes/tea"]


def test_include_and_exclude_globs_select_the_files(tenant, docs):
    source = source_create(
        tenant=tenant, name="guide", kind="folder", location=str(docs), include=["guide/*"], exclude=["*/bread.md"]
    )

    source_sync(source=source)

    assert live_ids(tenant) == ["guide/boiling"]


def test_a_document_id_another_source_holds_is_refused_for_that_file_only(tenant, docs, source):
    from knowledge.ingestion.readers import ReadDocument
    from knowledge.services import documents_ingest

    documents_ingest(tenant=tenant, source=source, documents=[ReadDocument("notes/tea", "Tea", "Tea by hand.")])
    folder = source_create(tenant=tenant, name="kitchen", kind="folder", location=str(docs))

    run = source_sync(source=folder)

    assert run.counts()["new"] == 2 and run.counts()["failed"] == 1
    assert "already has a document with this id" in run.errors[0]["error"]
    assert Document.objects.get(tenant=tenant, external_id="notes/tea").source == source


def test_one_sync_per_source_at_a_time(tenant, folder_source):
    active = SyncRun.objects.create(tenant=tenant, source=folder_source, status="running")

    with pytest.raises(InvalidInput, match="already going on"):
        source_sync(source=folder_source)
    assert sync_run_request(source=folder_source).pk == active.pk


def test_a_source_filled_by_hand_is_not_synced(tenant, source):
    with pytest.raises(InvalidInput, match="filled by hand"):
        source_sync(source=source)


def test_the_schedule_starts_runs_only_for_sources_that_are_due(tenant, docs, django_capture_on_commit_callbacks):
    hourly = source_create(tenant=tenant, name="hourly", kind="folder", location=str(docs), sync_every="1h")
    source_create(tenant=tenant, name="by-hand", kind="folder", location=str(docs / "guide"))

    with django_capture_on_commit_callbacks(execute=True):
        first = sources_sync_due()  # never synced: due (runs at once, without a broker)

    assert SyncRun.objects.filter(pk__in=first).values_list("source__name", flat=True).get() == "hourly"
    assert SyncRun.objects.get(pk=first[0]).status == "done"
    assert sources_sync_due() == []  # synced a moment ago
    Source.objects.filter(pk=hourly.pk).update(last_synced_at=timezone.now() - timedelta(hours=2))
    SyncRun.objects.filter(source=hourly).update(created_at=timezone.now() - timedelta(hours=2))
    assert len(sources_sync_due()) == 1


def test_the_schedule_requeues_a_run_whose_worker_died(tenant, folder_source, django_capture_on_commit_callbacks):
    dead = SyncRun.objects.create(
        tenant=tenant,
        source=folder_source,
        status="running",
        worker_id="gone/1",
        attempts=1,
        lease_expires_at=timezone.now() - timedelta(seconds=1),
    )

    with django_capture_on_commit_callbacks(execute=True):
        assert dead.pk in sources_sync_due()

    dead.refresh_from_db()
    assert dead.status == "done" and dead.attempts == 2 and dead.new == 3


def test_source_add_sync_and_list_on_the_command_line(tenant, docs, capsys):
    call_command(
        "source",
        "add",
        "--tenant",
        tenant.slug,
        "--name",
        "kitchen",
        "--kind",
        "folder",
        "--location",
        str(docs),
        "--every",
        "1h",
        "--exclude",
        "notes/*",
    )
    call_command("source", "sync", "--tenant", tenant.slug, "--name", "kitchen", "--json")
    counts = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    call_command("source", "sync", "--tenant", tenant.slug, "--name", "kitchen")
    again = capsys.readouterr().out
    call_command("source", "list", "--tenant", tenant.slug, "--json")
    listing = json.loads(capsys.readouterr().out)

    assert {k: counts[k] for k in ("new", "updated", "unchanged", "deleted", "failed")} == {
        "new": 2,
        "updated": 0,
        "unchanged": 0,
        "deleted": 0,
        "failed": 0,
    }
    assert "nothing new (2 unchanged)" in again
    assert listing[0]["name"] == "kitchen" and listing[0]["documents"] == 2 and listing[0]["sync_every_s"] == 3600
    assert listing[0]["last_run"]["status"] == "done"


def test_source_add_refuses_bad_input_with_a_message(tenant):
    with pytest.raises(CommandError, match="web source's location is an http"):
        call_command("source", "add", "--tenant", tenant.slug, "--name", "site", "--kind", "web", "--location", "docs")
    with pytest.raises(CommandError, match="sync_every must be a duration"):
        call_command(
            "source",
            "add",
            "--tenant",
            tenant.slug,
            "--name",
            "f",
            "--kind",
            "folder",
            "--location",
            "/x",
            "--every",
            "soon",
        )
    assert not Source.objects.for_tenant(tenant).exists()


def test_a_refused_file_leaves_no_new_source_behind(tenant, tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"id": "a", "text": "Some text.", "published_at": "not a date"}) + "\n")

    with pytest.raises(CommandError):
        call_command("ingest", str(bad), "--tenant", tenant.slug, "--source", "bar-bad")

    assert not Source.objects.for_tenant(tenant).filter(name="bar-bad").exists()


def test_a_syncs_progress_gives_documents_done_chunks_per_second_and_time_left():
    progress = sync_progress(items=10, done=4, chunks=80, seconds=8.0)

    assert progress == {"stage": "ingesting", "items": 10, "done": 4, "chunks": 80, "chunks_per_s": 10.0, "eta_s": 12}
    assert sync_progress(items=10, done=0, chunks=0, seconds=0.5)["eta_s"] is None  # no rate before a file is in


def test_a_running_sync_records_its_progress_as_it_goes(tenant, folder_source, monkeypatch):
    monkeypatch.setattr(sync_runner, "BATCH_DOCUMENTS", 1)
    seen = []
    ingest = sync_runner.ingest_isolating

    def watched(*args, **kwargs):
        seen.append(SyncRun.objects.get(source=folder_source).progress)
        yield from ingest(*args, **kwargs)

    monkeypatch.setattr(sync_runner, "ingest_isolating", watched)

    run = source_sync(source=folder_source)

    assert [(p["done"], p["items"]) for p in seen] == [(0, 3), (1, 3), (2, 3)]
    assert seen[0]["chunks_per_s"] is None and seen[2]["chunks"] >= 2 and seen[2]["chunks_per_s"] > 0
    assert seen[2]["eta_s"] is not None
    assert run.progress == {}  # a finished run keeps no progress
