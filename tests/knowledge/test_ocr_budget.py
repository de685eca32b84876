"""Scanned pages past the OCR budget (KB_OCR_MAX_PAGES): the document is stored with the pages it
read, and the sync run or the ingestion job that read it names the pages left out, without failing."""

import pytest

from knowledge.ingestion.documents import ReadDocument
from knowledge.models import Document
from knowledge.services import ingestion_job_run, upload_ingest
from knowledge.services.ingest_reports import ocr_budget_notes, page_ranges
from knowledge.services.sources import source_create
from knowledge.services.sync import source_sync
from tests.factories import folder_granted
from tests.knowledge import pdf_samples

NOTE = "pages 2-4 not read (OCR budget 0 pages)"


def scanned(metadata: dict) -> ReadDocument:
    return ReadDocument(external_id="report.pdf", title="Report", text="Typed pages.", metadata=metadata)


@pytest.fixture
def no_ocr_budget(settings):
    """No page may be read by OCR, so every scanned page is past the budget (no engine runs)."""
    settings.KB_OCR_MAX_PAGES = 0


def test_pages_past_the_budget_are_named_as_ranges_with_the_budget(settings):
    settings.KB_OCR_MAX_PAGES = 10
    document = scanned({"ocr_pages": list(range(1, 11)), "ocr_skipped": list(range(11, 41))})

    [note] = ocr_budget_notes([document])

    assert str(note) == "report.pdf: pages 11-40 not read (OCR budget 10 pages)"


def test_page_ranges_join_consecutive_pages_and_keep_single_ones_apart():
    assert page_ranges([7]) == "page 7"
    assert page_ranges([9, 3, 4, 5]) == "pages 3-5, 9"


def test_pages_skipped_with_ocr_off_are_not_taken_for_pages_past_the_budget(settings):
    settings.KB_OCR_MAX_PAGES = 10
    off = scanned({"ocr_pages": [], "ocr_skipped": [2, 3]})
    within = scanned({"ocr_pages": [2, 3], "ocr_skipped": []})

    assert ocr_budget_notes([off, within]) == []


def test_a_sync_run_names_the_pages_past_the_ocr_budget_and_still_succeeds(tenant, tmp_path, no_ocr_budget):
    folder = folder_granted(tenant, tmp_path / "archive")
    (folder / "report.pdf").write_bytes(pdf_samples.scans_pdf(3))
    (folder / "notes.md").write_text("# Notes\n\nThe archive holds the scanned minutes of 1998.")
    source = source_create(tenant=tenant, name="archive", kind="folder", location=str(folder))

    run = source_sync(source=source)

    assert run.status == "done", run.error
    assert run.counts() == {"new": 2, "updated": 0, "unchanged": 0, "deleted": 0, "failed": 0}
    assert run.errors == [{"document": "report.pdf", "error": NOTE}]
    stored = Document.objects.for_tenant(tenant).get(external_id="report")
    assert "begins with this typed page" in stored.versions.get(is_current=True).text


def test_an_upload_job_names_the_pages_past_the_ocr_budget_in_its_result_and_is_done(
    tenant, settings, tmp_path, no_ocr_budget, django_capture_on_commit_callbacks
):
    settings.KB_DATA_DIR = tmp_path
    with django_capture_on_commit_callbacks(execute=False):  # queued, not run: run below
        job = upload_ingest(
            tenant=tenant, source_name="scans", file_name="report.pdf", data=pdf_samples.scans_pdf(3), options={}
        )

    job = ingestion_job_run(job_id=job.pk, worker_id="cpu/1")

    assert (job.status, job.error) == ("done", "")
    assert job.result["created"] == 1
    assert job.result["notes"] == [f"report.pdf: {NOTE}"]
    assert Document.objects.for_tenant(tenant).get(external_id="report.pdf").metadata["ocr_skipped"] == [2, 3, 4]
