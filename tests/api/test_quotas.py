"""Quotas at the API: an upload job (a PDF's kept original included), a new source, a sync and a
question, each over its limit."""

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile

from knowledge.models import Document, LLMUsage, Source, SyncRun, TenantQuota
from knowledge.originals import tenant_originals_folder
from knowledge.quotas import usage_count
from tests.api.conftest import stored_counts
from tests.api.test_pages import harbour_pdf
from tests.conftest import free_port
from tests.factories import folder_granted

NOTE = b"# Onboarding\n\nNew starters get a laptop on their first day.\n"


@pytest.fixture(autouse=True)
def no_installation_limits(settings):
    for name in ("DOCUMENTS", "STORED_MB", "CHUNKS", "SOURCES", "SYNCS_PER_DAY", "LLM_TOKENS_PER_DAY"):
        setattr(settings, f"KB_QUOTA_{name}", None)


def upload(client, name, data, **fields):
    return client.post("/api/v1/documents/", {"file": SimpleUploadedFile(name, data), **fields}, format="multipart")


def test_an_upload_job_over_the_document_limit_fails_with_the_figures_and_stores_nothing(
    corpus, editor_client, django_capture_on_commit_callbacks
):
    """A JSONL file names its documents in its lines: the request cannot count them, the job does."""
    TenantQuota.objects.create(tenant=corpus, max_documents=4)
    documents_before = Document.objects.for_tenant(corpus).count()
    lines = b'{"id": "a", "text": "First new note."}\n{"id": "b", "text": "Second new note."}\n'

    with django_capture_on_commit_callbacks(execute=True):
        response = upload(editor_client, "notes.jsonl", lines, source="handbook")

    assert response.status_code == 202
    job = editor_client.get(response.json()["urls"]["self"]).json()
    assert job["status"] == "failed"
    assert job["error"] == (
        "This tenant may keep 4 documents and has 3; this would add 2; ask the operator to raise the limit. "
        "Nothing from this file was stored."
    )
    assert Document.objects.for_tenant(corpus).count() == documents_before


def test_a_pdf_upload_whose_text_fits_but_whose_kept_original_passes_the_stored_bytes_limit_fails(
    corpus, editor_client, upload_dir, django_capture_on_commit_callbacks
):
    pdf = harbour_pdf()
    held = usage_count(tenant=corpus)["stored_bytes"]
    TenantQuota.objects.create(tenant=corpus, max_stored_bytes=held + len(pdf) - 1)

    with django_capture_on_commit_callbacks(execute=True):
        response = upload(editor_client, "harbour.pdf", pdf, source="manuals")

    assert response.status_code == 202
    job = editor_client.get(response.json()["urls"]["self"]).json()
    assert job["status"] == "failed"
    assert job["error"].startswith(
        f"This tenant may keep {held + len(pdf) - 1:,} bytes of stored text and has {held:,}"
    )
    assert not Document.objects.for_tenant(corpus).filter(external_id="harbour.pdf").exists()
    assert usage_count(tenant=corpus)["stored_bytes"] == held
    assert not tenant_originals_folder(corpus.pk).exists()


def test_an_upload_into_a_new_source_over_the_source_limit_is_refused_with_403(corpus, editor_client, upload_dir):
    TenantQuota.objects.create(tenant=corpus, max_sources=1)
    before = stored_counts(corpus)

    response = upload(editor_client, "onboarding.md", NOTE, source="a-second-source")

    assert response.status_code == 403
    assert response.json()["error"] == {
        "code": "quota_exceeded",
        "message": "This tenant may keep 1 source and has 1; ask the operator to raise the limit.",
    }
    assert stored_counts(corpus) == before
    assert not Source.objects.for_tenant(corpus).filter(name="a-second-source").exists()


def test_creating_a_source_over_the_source_limit_is_refused_with_403(corpus, admin_client, tmp_path_factory):
    TenantQuota.objects.create(tenant=corpus, max_sources=1)
    folder = folder_granted(corpus, tmp_path_factory.mktemp("notes"))  # outside the data directory (tmp_path)

    response = admin_client.post(
        "/api/v1/sources/", {"name": "notes", "kind": "folder", "location": str(folder)}, format="json"
    )

    assert response.status_code == 403
    assert response.json()["error"]["code"] == "quota_exceeded"
    assert Source.objects.for_tenant(corpus).count() == 1


def test_the_sync_past_the_days_limit_is_429(
    tenant, admin_client, tmp_path_factory, django_capture_on_commit_callbacks
):
    folder = tmp_path_factory.mktemp("notes")  # outside the data directory (tmp_path)
    (folder / "tea.md").write_text("# Tea\n\nSteep green tea for two minutes.")
    source = Source.objects.create(
        tenant=tenant, name="notes", kind="folder", location=str(folder_granted(tenant, folder))
    )
    TenantQuota.objects.create(tenant=tenant, max_syncs_per_day=1)

    with django_capture_on_commit_callbacks(execute=True):
        first = admin_client.post(f"/api/v1/sources/{source.pk}/sync/")
    with django_capture_on_commit_callbacks(execute=True):
        second = admin_client.post(f"/api/v1/sources/{source.pk}/sync/")

    assert first.status_code == 202
    assert SyncRun.objects.get(source=source).status == "done"
    assert second.status_code == 429
    assert second.json()["error"] == {
        "code": "quota_exceeded",
        "message": "This tenant may run 1 sync a day and has run 1 in the last 24 hours; "
        "try again later or ask the operator to raise the limit.",
    }
    assert SyncRun.objects.filter(source=source).count() == 1


def test_a_question_over_the_token_limit_is_answered_without_the_llm_and_says_quota_exceeded(
    corpus, member_client, settings
):
    # A configured model nobody serves: calling it would degrade the answer with another reason.
    settings.KB_LLM_MODEL = "quota-test-model"
    settings.OPENAI_BASE_URL = f"http://127.0.0.1:{free_port()}/v1"
    TenantQuota.objects.create(tenant=corpus, max_llm_tokens_per_day=2000)
    LLMUsage.objects.create(tenant=corpus, purpose="answer", tokens_in=1900, tokens_out=100)

    response = member_client.post("/api/v1/ask/", {"question": "How long do I boil spaghetti?"}, format="json")

    assert response.status_code == 200
    answer = response.json()
    assert answer["mode"] == "extractive" and answer["citations"]
    assert answer["degraded"] is True
    assert answer["degraded_reason"] == (
        "quota_exceeded: This tenant may use 2,000 LLM tokens a day and has used 2,000 in the last 24 hours; "
        "try again later or ask the operator to raise the limit."
    )
    assert answer["usage"]["llm_calls"] == 0


def test_an_upload_of_a_new_document_to_a_tenant_at_its_document_limit_is_refused_before_it_is_stored(
    corpus, editor_client, upload_dir
):
    TenantQuota.objects.create(tenant=corpus, max_documents=3)  # the corpus holds three

    response = editor_client.post(
        "/api/v1/documents/",
        {"file": SimpleUploadedFile("new.md", b"# New\n\nA fourth document.\n")},
        format="multipart",
    )

    assert response.status_code == 403
    assert response.json()["error"]["code"] == "quota_exceeded"
    assert "may keep 3 documents and has 3" in response.json()["error"]["message"]
    assert not upload_dir.exists() or not any(p.is_file() for p in upload_dir.rglob("*"))
