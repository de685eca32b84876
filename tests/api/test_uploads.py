from pathlib import Path

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile

from knowledge.models import Document, IngestionJob, Source
from tests.api.conftest import stored_counts

NOTE = (
    b"# Onboarding\n\nNew starters get a laptop on their first day.\n\n## Accounts\n\nIT creates your e-mail account.\n"
)


def upload(client, name, data, **fields):
    return client.post("/api/v1/documents/", {"file": SimpleUploadedFile(name, data), **fields}, format="multipart")


def test_uploading_a_markdown_file_queues_a_job_that_ingests_it(
    tenant, editor_client, django_capture_on_commit_callbacks
):
    with django_capture_on_commit_callbacks(execute=True):
        response = upload(editor_client, "onboarding.md", NOTE)
    assert response.status_code == 202
    job = response.json()
    assert job["status"] == "pending"
    assert job["source"] == "uploads"
    assert job["urls"]["self"] == f"/api/v1/jobs/{job['id']}/"

    finished = editor_client.get(job["urls"]["self"]).json()
    assert finished["status"] == "done", finished["error"]
    assert finished["result"]["created"] == 1
    document = Document.objects.get(tenant=tenant, external_id="onboarding.md")
    assert document.title == "Onboarding"
    assert document.source.kind == Source.Kind.UPLOAD
    assert finished["urls"]["documents"] == [f"/api/v1/documents/{document.pk}/"]
    assert editor_client.get(f"/api/v1/documents/{document.pk}/").json()["versions"][0]["chunk_count"] > 0


def test_an_upload_is_stored_under_the_tenants_upload_folder_until_its_job_ends(
    tenant, admin_client, upload_dir, django_capture_on_commit_callbacks
):
    with django_capture_on_commit_callbacks() as queued:  # the job is queued, not yet run
        response = upload(admin_client, "../../evil name.md", NOTE)
    assert response.status_code == 202
    job = IngestionJob.objects.get(pk=response.json()["id"])
    [stored] = (upload_dir / tenant.slug).glob("*/*")
    assert str(stored) == job.stored_path
    assert stored.name == "evil_name.md"
    assert stored.read_bytes() == NOTE

    with django_capture_on_commit_callbacks(execute=True):
        for run_job in queued:
            run_job()
    job.refresh_from_db()
    assert job.status == IngestionJob.Status.DONE, job.error
    assert not stored.exists() and not stored.parent.exists()  # the text lives on in the document's version
    document = Document.objects.get(tenant=tenant)
    assert document.uri == job.file_name and str(upload_dir) not in document.uri  # never the server's path


def test_upload_options_set_the_source_id_title_and_reader(tenant, editor_client, django_capture_on_commit_callbacks):
    rst = b"Release notes\n=============\n\nThe *new* importer reads ``.rst`` files.\n"
    with django_capture_on_commit_callbacks(execute=True):
        response = upload(
            editor_client, "notes.txt", rst, source="releases", external_id="rel/1", title="Release 1", format="rst"
        )
    assert response.status_code == 202
    assert editor_client.get(response.json()["urls"]["self"]).json()["status"] == "done"
    document = Document.objects.get(tenant=tenant, external_id="rel/1")
    assert (document.title, document.source.name) == ("Release 1", "releases")
    assert "``" not in document.versions.get().text  # the reST reader drops inline markup


BAD_FILES = [
    ("empty.md", b"", 400, "empty_file", "empty.md: the file is empty."),
    ("blank.txt", b"  \n\n ", 400, "empty_file", "blank.txt: the file is empty."),
    ("x.txt", b"text\x00\x01\x02 with NULs", 400, "binary_file", "x.txt: looks like a binary file, not text."),
    ("x.exe", b"MZ\x90\x00", 415, "unsupported_file_type", None),
    (
        "docs.jsonl",
        b'{"id": "a", "text": "First document."}\n{"id": "b", "text": "broken\n',
        400,
        "malformed_jsonl",
        None,
    ),
    (
        "dates.jsonl",
        b'{"id": "a", "text": "ok"}\n{"id": "b", "text": "ok", "published_at": "2024-02-30"}\n',
        400,
        "malformed_jsonl",
        "dates.jsonl, line 2: invalid date '2024-02-30' (day is out of range for month).",
    ),
    (
        "times.jsonl",
        b'{"id": "a", "text": "ok", "published_at": "2024-13-01T25:61:00"}\n',
        400,
        "malformed_jsonl",
        "times.jsonl, line 1: invalid date '2024-13-01T25:61:00' (month must be in 1..12).",
    ),
    (
        "nul.jsonl",
        b'{"id": "a", "text": "ok"}\n{"id": "b", "title": "B\\u0000", "text": "ok"}\n',
        400,
        "malformed_jsonl",
        "nul.jsonl, line 2: field 'title' contains a NUL character (\\u0000).",
    ),
    ("meta.jsonl", b'{"id": "a", "text": "ok", "team": "x\\u0000"}\n', 400, "malformed_jsonl", None),
    ("text.jsonl", b'{"id": "a", "text": "o\\u0000k"}\n', 400, "malformed_jsonl", None),
    ("ids.jsonl", b'{"id": "' + b"i" * 1001 + b'", "text": "ok"}\n', 400, "malformed_jsonl", None),
    ("uris.jsonl", b'{"id": "a", "uri": "' + b"u" * 2001 + b'", "text": "ok"}\n', 400, "malformed_jsonl", None),
    ("odd.txt", b"\xff\xfeH\x00i\x00!", 400, "binary_file", None),
    (
        "report.docx",
        b"PK\x03\x04 not really a Word document",
        400,
        "invalid_document",
        "report.docx: not a valid Word document (the file is damaged or is not .docx).",
    ),
    (
        "locked.xlsx",
        b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1" + "EncryptedPackage".encode("utf-16-le"),
        400,
        "encrypted_file",
        "locked.xlsx: the file is encrypted (password-protected); save it without a password.",
    ),
]


@pytest.mark.parametrize(("name", "data", "status", "code", "message"), BAD_FILES)
def test_a_bad_file_is_rejected_and_nothing_is_stored(
    corpus, editor_client, upload_dir, django_capture_on_commit_callbacks, name, data, status, code, message
):
    before = stored_counts(corpus)
    with django_capture_on_commit_callbacks(execute=True) as callbacks:
        response = upload(editor_client, name, data)
    assert response.status_code == status
    error = response.json()["error"]
    assert error["code"] == code
    assert error["message"].startswith(f"{name}")
    if message:
        assert error["message"] == message
    assert stored_counts(corpus) == before
    assert not callbacks
    assert not upload_dir.exists() or not any(upload_dir.rglob("*.*"))
    assert not Source.objects.for_tenant(corpus).filter(name="uploads").exists()


def test_uploading_a_word_document_ingests_its_text_and_headings(
    tenant, editor_client, tmp_path, django_capture_on_commit_callbacks
):
    from tests.knowledge.test_office_readers import make_docx

    data = make_docx(tmp_path / "travel.docx").read_bytes()
    with django_capture_on_commit_callbacks(execute=True):
        response = upload(editor_client, "travel.docx", data)
    assert response.status_code == 202
    finished = editor_client.get(response.json()["urls"]["self"]).json()
    assert finished["status"] == "done", finished["error"]
    document = Document.objects.get(tenant=tenant, external_id="travel.docx")
    assert document.title == "Travel policy"
    version = document.versions.get()
    assert "| City | Nightly rate |\n| --- | --- |\n| Paris | 180 EUR |" in version.text
    assert any(chunk.heading.startswith("Travel policy") for chunk in version.chunks.all())


def test_the_malformed_jsonl_message_names_the_broken_line(corpus, editor_client):
    response = upload(editor_client, "docs.jsonl", b'{"id": "a", "text": "ok"}\n{"id": "b", "text": broken}\n')
    assert response.status_code == 400
    assert "line 2" in response.json()["error"]["message"]


def test_a_file_over_the_size_limit_is_rejected_with_413(corpus, editor_client, settings, upload_dir):
    settings.KB_MAX_UPLOAD_BYTES = 1024
    before = stored_counts(corpus)
    response = upload(editor_client, "big.md", b"# Big\n\n" + b"word " * 400)
    assert response.status_code == 413
    assert response.json()["error"]["code"] == "payload_too_large"
    assert stored_counts(corpus) == before
    assert not upload_dir.exists()


def test_a_file_at_the_size_limit_is_accepted(tenant, editor_client, settings):
    settings.KB_MAX_UPLOAD_BYTES = 1024
    data = (b"# Small\n\n" + b"word " * 300)[:1024]
    assert upload(editor_client, "small.md", data).status_code == 202


def test_a_member_cannot_upload(corpus, member_client, upload_dir):
    before = stored_counts(corpus)
    response = upload(member_client, "onboarding.md", NOTE)
    assert response.status_code == 403
    assert response.json()["error"]["code"] == "permission_denied"
    assert stored_counts(corpus) == before
    assert not upload_dir.exists()


def test_an_upload_without_a_file_is_a_400_in_the_error_shape(tenant, editor_client):
    response = editor_client.post("/api/v1/documents/", {"source": "x"}, format="multipart")
    assert response.status_code == 400
    assert response.json()["error"]["code"] == "invalid_input"
    assert "file" in response.json()["error"]["message"]


def test_utf16_text_with_a_bom_is_ingested(tenant, editor_client, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=True):
        response = upload(editor_client, "notes.md", NOTE.decode().encode("utf-16"))
    assert response.status_code == 202
    assert editor_client.get(response.json()["urls"]["self"]).json()["status"] == "done"
    assert Document.objects.get(tenant=tenant, external_id="notes.md").title == "Onboarding"


def test_a_very_long_file_name_is_stored_within_200_bytes(
    tenant, editor_client, upload_dir, django_capture_on_commit_callbacks
):
    name = "文" * 300 + ".md"
    with django_capture_on_commit_callbacks(execute=True):
        response = upload(editor_client, name, NOTE)
    assert response.status_code == 202
    assert editor_client.get(response.json()["urls"]["self"]).json()["status"] == "done"
    stored = Path(IngestionJob.objects.get(pk=response.json()["id"]).stored_path)
    assert stored.suffix == ".md"
    assert 190 < len(stored.name.encode()) <= 200
    assert stored.name == "文" * 65 + ".md"


@pytest.mark.parametrize("failure", ["write", "database"])
def test_a_failure_after_validation_leaves_no_folder_behind(tenant, upload_dir, monkeypatch, failure):
    from knowledge.services import uploads

    if failure == "write":  # e.g. "File name too long" from the file system
        monkeypatch.setattr(uploads, "_safe_file_name", lambda name: "x" * 300 + ".md")
        expected = OSError
    else:
        monkeypatch.setattr(uploads, "source_get_or_create", lambda **kw: (_ for _ in ()).throw(RuntimeError("db")))
        expected = RuntimeError
    with pytest.raises(expected):
        uploads.upload_ingest(tenant=tenant, source_name="uploads", file_name="a.md", data=NOTE, options={})
    assert not any((upload_dir / tenant.slug).iterdir())
    assert not IngestionJob.objects.for_tenant(tenant).exists()


@pytest.mark.parametrize(("field", "value"), [("external_id", "i" * 1001), ("title", "t" * 501), ("title", "a\x00b")])
def test_upload_options_over_the_model_limits_are_refused(tenant, editor_client, upload_dir, field, value):
    response = upload(editor_client, "onboarding.md", NOTE, **{field: value})
    assert response.status_code == 400
    assert response.json()["error"]["code"] == "invalid_input"  # the API's serializer checks the options
    assert not upload_dir.exists()


def stored_files(upload_dir) -> list:
    return [p for p in upload_dir.rglob("*") if p.is_file()] if upload_dir.exists() else []


def test_a_job_that_fails_removes_its_stored_file_and_says_why_with_its_code(
    tenant, editor_client, upload_dir, django_capture_on_commit_callbacks
):
    with django_capture_on_commit_callbacks(execute=True):
        response = upload(editor_client, "broken.pdf", b"%PDF-1.4 and nothing a reader can use")
    assert response.status_code == 202  # the request only checks the signature: the job reads it
    job = editor_client.get(response.json()["urls"]["self"]).json()
    assert job["status"] == "failed"
    assert job["error"].startswith("broken.pdf: not a readable PDF")
    assert job["error"].endswith("Nothing from this file was stored.")
    assert job["result"]["error_code"] == "invalid_pdf"
    assert stored_files(upload_dir) == []
    assert not Document.objects.for_tenant(tenant).exists()


def test_deleting_an_uploaded_document_removes_its_file_if_it_is_still_stored(
    tenant, editor_client, upload_dir, django_capture_on_commit_callbacks
):
    with django_capture_on_commit_callbacks() as queued:
        response = upload(editor_client, "onboarding.md", NOTE)
    job = IngestionJob.objects.get(pk=response.json()["id"])
    with django_capture_on_commit_callbacks(execute=True):
        for run_job in queued:
            run_job()
    document = Document.objects.get(tenant=tenant)
    # A file left from before files were removed at the end of their job.
    Path(job.stored_path).parent.mkdir(parents=True)
    Path(job.stored_path).write_bytes(NOTE)

    with django_capture_on_commit_callbacks() as on_commit:
        assert editor_client.delete(f"/api/v1/documents/{document.pk}/").status_code == 204
    assert Path(job.stored_path).exists()  # not before the deletion commits
    for callback in on_commit:
        callback()
    assert stored_files(upload_dir) == []


def test_deleting_a_source_removes_the_files_of_its_uploads_still_waiting(
    tenant, admin_client, upload_dir, django_capture_on_commit_callbacks
):
    with django_capture_on_commit_callbacks():  # queued, never run
        response = upload(admin_client, "onboarding.md", NOTE, source="handouts")
    assert response.status_code == 202
    assert len(stored_files(upload_dir)) == 1
    source = Source.objects.for_tenant(tenant).get(name="handouts")
    with django_capture_on_commit_callbacks(execute=True):
        assert admin_client.delete(f"/api/v1/sources/{source.pk}/").status_code == 204
    assert stored_files(upload_dir) == []
    assert not IngestionJob.objects.for_tenant(tenant).exists()


def test_a_queued_path_job_never_removes_the_users_own_file(tenant, tmp_path, django_capture_on_commit_callbacks):
    from knowledge.services import ingestion_job_run, paths_enqueue

    (tmp_path / "docs").mkdir()
    guide = tmp_path / "docs" / "guide.md"
    guide.write_text("# Guide\n\nStep one is to read the manual carefully.")
    with django_capture_on_commit_callbacks():
        [job] = paths_enqueue(tenant=tenant, source=Source(tenant=tenant, name="handbook"), paths=[tmp_path / "docs"])
    with django_capture_on_commit_callbacks(execute=True):
        assert ingestion_job_run(job_id=job.pk).status == "done"
    assert guide.exists()


def test_a_job_whose_pdf_has_scans_past_the_ocr_budget_is_done_and_its_result_names_the_pages(
    tenant, editor_client, settings, upload_dir, django_capture_on_commit_callbacks
):
    from tests.knowledge import pdf_samples

    settings.KB_OCR_MAX_PAGES = 0  # every scanned page is past the budget; no OCR engine runs
    with django_capture_on_commit_callbacks(execute=True):
        response = upload(editor_client, "report.pdf", pdf_samples.scans_pdf(3))
    assert response.status_code == 202

    job = editor_client.get(response.json()["urls"]["self"]).json()
    assert job["status"] == "done", job["error"]
    assert job["result"]["notes"] == ["report.pdf: pages 2-4 not read (OCR budget 0 pages)"]
