"""Quotas where knowledge writes: ingestion (documents, stored bytes, chunks, a new source), sources,
and syncs (by hand and on the schedule)."""

from datetime import timedelta

import pytest
from django.utils import timezone

from knowledge.embedders import get_embedder
from knowledge.ingestion.readers import ReadDocument
from knowledge.models import Chunk, Document, DocumentVersion, Source, SyncRun, TenantQuota
from knowledge.originals import original_path, tenant_originals_folder
from knowledge.quotas import QuotaExceeded, usage_count
from knowledge.services import document_delete, documents_ingest, source_get_or_create
from knowledge.services.deletion import document_mark_deleted
from knowledge.services.sync import source_sync, sources_sync_due, sync_run_request
from tests.api.test_pages import harbour_pdf, harbour_splitter, paged_document
from tests.conftest import BIKE, PASTA, TAXES
from tests.factories import SourceFactory, TenantFactory, folder_granted


@pytest.fixture(autouse=True)
def no_installation_limits(settings):
    for name in ("DOCUMENTS", "STORED_MB", "CHUNKS", "SOURCES", "SYNCS_PER_DAY", "LLM_TOKENS_PER_DAY"):
        setattr(settings, f"KB_QUOTA_{name}", None)


def limit(tenant, **fields) -> TenantQuota:
    """Give ``tenant`` its own limits (``max_documents=...``)."""
    quota, _ = TenantQuota.objects.update_or_create(tenant=tenant, defaults=fields)
    return quota


class CountingEmbedder:
    """The real local embedder, counting the texts it is asked to embed."""

    def __init__(self):
        self.real = get_embedder("local")
        self.key, self.dimensions = self.real.key, self.real.dimensions
        self.texts = 0

    def embed(self, texts):
        self.texts += len(texts)
        return self.real.embed(texts)


def stored(tenant) -> tuple[int, int, int]:
    """(documents, versions, chunks) of ``tenant``."""
    return (
        Document.objects.for_tenant(tenant).count(),
        DocumentVersion.objects.for_tenant(tenant).count(),
        Chunk.objects.for_tenant(tenant).count(),
    )


# --- Ingestion --------------------------------------------------------------------------------


def test_an_ingestion_past_the_document_limit_stores_nothing_and_embeds_nothing(tenant, source):
    documents_ingest(tenant=tenant, source=source, documents=[PASTA])
    limit(tenant, max_documents=2)
    before = stored(tenant)
    embedder = CountingEmbedder()

    with pytest.raises(QuotaExceeded) as refused:
        documents_ingest(tenant=tenant, source=source, documents=[BIKE, TAXES], embedder=embedder)

    assert refused.value.message == (
        "This tenant may keep 2 documents and has 1; this would add 2; ask the operator to raise the limit."
    )
    assert stored(tenant) == before
    assert embedder.texts == 0


def test_an_ingestion_that_reaches_the_document_limit_exactly_is_stored(tenant, source):
    limit(tenant, max_documents=3)

    report = documents_ingest(tenant=tenant, source=source, documents=[PASTA, BIKE, TAXES])

    assert report.counts()["created"] == 3


def test_at_the_document_limit_unchanged_documents_and_new_versions_of_existing_ones_still_go_in(tenant, source):
    documents_ingest(tenant=tenant, source=source, documents=[PASTA, BIKE])
    limit(tenant, max_documents=2)
    edited = ReadDocument(external_id=PASTA.external_id, title=PASTA.title, text=PASTA.text + " Salt the water well.")

    report = documents_ingest(tenant=tenant, source=source, documents=[edited, BIKE])

    assert [o.status for o in report.outcomes] == ["updated", "unchanged"]
    with pytest.raises(QuotaExceeded, match="may keep 2 documents and has 2"):
        documents_ingest(tenant=tenant, source=source, documents=[TAXES])


def test_a_document_deleted_at_its_source_frees_its_place_and_takes_it_again_when_it_returns(tenant, source):
    documents_ingest(tenant=tenant, source=source, documents=[PASTA, BIKE])
    limit(tenant, max_documents=2)
    bike = Document.objects.for_tenant(tenant).get(external_id=BIKE.external_id)
    assert document_mark_deleted(document_id=bike.pk, when=timezone.now())

    documents_ingest(tenant=tenant, source=source, documents=[TAXES])

    with pytest.raises(QuotaExceeded, match="may keep 2 documents and has 2; ask the operator"):
        documents_ingest(tenant=tenant, source=source, documents=[BIKE])


def test_an_ingestion_past_the_stored_bytes_limit_stores_nothing(tenant, source):
    documents_ingest(tenant=tenant, source=source, documents=[PASTA])
    held = usage_count(tenant=tenant, names=["stored_bytes"])["stored_bytes"]
    limit(tenant, max_stored_bytes=held + len(BIKE.text.encode()) - 1)
    before = stored(tenant)

    with pytest.raises(QuotaExceeded) as refused:
        documents_ingest(tenant=tenant, source=source, documents=[BIKE])

    assert refused.value.quota.name == "stored_bytes" and refused.value.status == 403
    assert f"bytes of stored text and has {held:,}" in refused.value.message
    assert stored(tenant) == before


def test_a_kept_original_pdf_counts_in_stored_bytes_with_its_text_and_leaves_with_its_document(
    tenant, source, settings, tmp_path, django_capture_on_commit_callbacks
):
    settings.KB_DATA_DIR = tmp_path
    pdf = harbour_pdf()
    manual = paged_document(original=pdf)
    held = usage_count(tenant=tenant, names=["stored_bytes"])["stored_bytes"]

    with django_capture_on_commit_callbacks(execute=True):
        documents_ingest(tenant=tenant, source=source, documents=[manual], splitter=harbour_splitter())

    version = DocumentVersion.objects.for_tenant(tenant).get(document__external_id=manual.external_id)
    kept = original_path(tenant_id=tenant.pk, document_id=version.document_id, number=version.number)
    assert version.original_bytes == kept.stat().st_size == len(pdf)
    grown = usage_count(tenant=tenant, names=["stored_bytes"])["stored_bytes"] - held
    assert grown == len(manual.text.encode("utf-8")) + len(pdf)

    with django_capture_on_commit_callbacks(execute=True):
        document_delete(tenant=tenant, document_id=version.document_id)

    assert usage_count(tenant=tenant, names=["stored_bytes"])["stored_bytes"] == held
    assert not kept.exists()


def test_an_ingestion_whose_text_fits_but_whose_original_does_not_is_refused_and_keeps_no_file(
    tenant, source, settings, tmp_path, django_capture_on_commit_callbacks
):
    settings.KB_DATA_DIR = tmp_path
    pdf = harbour_pdf()
    manual = paged_document(original=pdf)
    held = usage_count(tenant=tenant, names=["stored_bytes"])["stored_bytes"]
    limit(tenant, max_stored_bytes=held + len(manual.text.encode("utf-8")) + len(pdf) - 1)
    before = stored(tenant)

    with pytest.raises(QuotaExceeded) as refused, django_capture_on_commit_callbacks(execute=True):
        documents_ingest(tenant=tenant, source=source, documents=[manual], splitter=harbour_splitter())

    assert refused.value.quota.name == "stored_bytes"
    assert refused.value.adding == len(manual.text.encode("utf-8")) + len(pdf)
    assert stored(tenant) == before
    assert not tenant_originals_folder(tenant.pk).exists()


def test_an_ingestion_past_the_chunk_limit_stores_nothing(tenant, source):
    documents_ingest(tenant=tenant, source=source, documents=[PASTA])
    held = usage_count(tenant=tenant, names=["chunks"])["chunks"]
    limit(tenant, max_chunks=held)
    before = stored(tenant)

    with pytest.raises(QuotaExceeded, match=rf"may keep {held} chunks? and has {held};"):
        documents_ingest(tenant=tenant, source=source, documents=[BIKE])

    assert stored(tenant) == before


def test_the_chunks_a_replaced_version_hands_on_to_its_duplicate_count_against_the_chunk_limit(tenant, source):
    twin = ReadDocument(external_id="recipes/pasta-copy", title="Pasta, again", text=PASTA.text)
    documents_ingest(tenant=tenant, source=source, documents=[PASTA, twin])  # the copy shares the chunks
    held = usage_count(tenant=tenant, names=["chunks"])["chunks"]
    edited = ReadDocument(external_id=PASTA.external_id, title=PASTA.title, text="Cooking pasta\n\nJust boil it.")
    limit(tenant, max_chunks=held + 1)  # room for the new version's chunk, not for the copies

    with pytest.raises(QuotaExceeded, match="chunks"):
        documents_ingest(tenant=tenant, source=source, documents=[edited])

    limit(tenant, max_chunks=2 * held + 1)
    documents_ingest(tenant=tenant, source=source, documents=[edited])
    assert usage_count(tenant=tenant, names=["chunks"])["chunks"] == 2 * held + 1


def test_a_new_source_saved_by_its_first_ingestion_counts_against_the_source_limit(tenant, source):
    limit(tenant, max_sources=1)
    unsaved = Source(tenant=tenant, name="more")

    with pytest.raises(QuotaExceeded, match="may keep 1 source and has 1"):
        documents_ingest(tenant=tenant, source=unsaved, documents=[PASTA])

    assert unsaved.pk is None and Source.objects.for_tenant(tenant).count() == 1


# --- Sources -----------------------------------------------------------------------------------


def test_a_source_past_the_source_limit_is_refused_and_an_existing_one_is_still_found(tenant, source):
    limit(tenant, max_sources=1)

    with pytest.raises(QuotaExceeded) as refused:
        source_get_or_create(tenant=tenant, name="another")
    with pytest.raises(QuotaExceeded):
        source_get_or_create(tenant=tenant, name="another", save=False)

    assert refused.value.status == 403
    assert source_get_or_create(tenant=tenant, name=source.name) == source
    assert Source.objects.for_tenant(tenant).count() == 1


def test_another_tenants_sources_do_not_count(tenant, source):
    SourceFactory.create_batch(3, tenant=TenantFactory())
    limit(tenant, max_sources=2)

    assert source_get_or_create(tenant=tenant, name="second").pk is not None


# --- Syncs -------------------------------------------------------------------------------------


@pytest.fixture
def folder_source(tenant, tmp_path):
    folder = tmp_path / "notes"
    folder.mkdir()
    for name, text in {
        "tea.md": "# Tea\n\nSteep green tea for two minutes.",
        "rye.md": "# Rye\n\nRye is dense.",
    }.items():
        (folder / name).write_text(text)
    folder_granted(tenant, folder)
    return Source.objects.create(tenant=tenant, name="notes", kind=Source.Kind.FOLDER, location=str(folder))


def runs_started(source, *hours_ago: float) -> None:
    """Finished sync runs of ``source`` that started that many hours ago."""
    for hours in hours_ago:
        run = SyncRun.objects.create(tenant=source.tenant, source=source, status=SyncRun.Status.DONE)
        SyncRun.objects.filter(pk=run.pk).update(created_at=timezone.now() - timedelta(hours=hours))


def test_the_sync_past_the_days_limit_is_refused_with_429_and_no_run_is_recorded(tenant, folder_source):
    limit(tenant, max_syncs_per_day=2)
    runs_started(folder_source, 1, 30)  # one today, one yesterday

    assert source_sync(source=folder_source).status == "done"
    with pytest.raises(QuotaExceeded) as refused:
        source_sync(source=folder_source)
    with pytest.raises(QuotaExceeded):
        sync_run_request(source=folder_source)

    assert refused.value.status == 429
    assert refused.value.message.startswith("This tenant may run 2 syncs a day and has run 2 in the last 24 hours")
    assert SyncRun.objects.filter(source=folder_source).count() == 3


def test_a_sync_whose_batch_would_pass_the_document_limit_fails_and_stores_nothing_of_it(tenant, folder_source):
    limit(tenant, max_documents=1)

    run = source_sync(source=folder_source)

    assert run.status == "failed"
    assert "This tenant may keep 1 document and has 0; this would add 2" in run.error
    assert stored(tenant) == (0, 0, 0)


def test_a_scheduled_sync_over_the_days_limit_is_skipped_quietly_while_other_tenants_sync(
    tenant, folder_source, tmp_path, django_capture_on_commit_callbacks
):
    Source.objects.filter(pk=folder_source.pk).update(sync_every=timedelta(hours=1))
    limit(tenant, max_syncs_per_day=1)
    runs_started(folder_source, 2)
    other = TenantFactory()
    folder = tmp_path / "other"
    folder.mkdir()
    (folder / "note.md").write_text("# Note\n\nA note of the other tenant.")
    folder_granted(other, folder)
    theirs = Source.objects.create(
        tenant=other, name="theirs", kind="folder", location=str(folder), sync_every=timedelta(hours=1)
    )

    with django_capture_on_commit_callbacks(execute=True):
        queued = sources_sync_due()

    assert list(SyncRun.objects.filter(pk__in=queued).values_list("source_id", "status")) == [(theirs.pk, "done")]
    assert SyncRun.objects.filter(source=folder_source).count() == 1  # no failed run recorded
    limit(tenant, max_syncs_per_day=2)
    with django_capture_on_commit_callbacks(execute=True):
        assert len(sources_sync_due()) == 1  # a higher limit: it starts on the next beat
