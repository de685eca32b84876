"""Uploading files from the Sources page (editors and above), the list of their jobs (polled with
htmx while one runs), and each synced source's last sync."""

import re
from datetime import UTC, datetime

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.urls import reverse

from core.models import Membership
from knowledge.models import AccessRule, Document, IngestionJob, Source, SyncRun
from tests.factories import DocumentVersionFactory, MembershipFactory, SourceFactory
from tests.security.test_headers import inline_code

SOURCES = reverse("portal:sources")
JOBS = reverse("portal:upload-jobs")
HX = {"HTTP_HX_REQUEST": "true"}
POLLING = 'hx-trigger="every 2s"'

ONBOARDING = b"# Onboarding\n\nNew starters get a laptop on their first day.\n"
PARKING = b"# Parking\n\nVisitors park behind the building, in the spaces marked P2.\n"


@pytest.fixture(autouse=True)
def upload_dir(settings, tmp_path):
    """Uploads are written under a temporary KB_DATA_DIR, never the real one."""
    settings.KB_DATA_DIR = tmp_path
    return tmp_path / "uploads"


@pytest.fixture
def editor(tenant):
    return MembershipFactory(tenant=tenant, role=Membership.Role.EDITOR).user


def md(name: str, data: bytes) -> SimpleUploadedFile:
    return SimpleUploadedFile(name, data, content_type="text/markdown")


def job_ids(location: str) -> list[int]:
    match = re.fullmatch(rf"{SOURCES}\?jobs=([\d,]+)", location)
    assert match, location
    return [int(i) for i in match.group(1).split(",")]


def pending_job(tenant, name: str = "later.md", status=IngestionJob.Status.PENDING) -> IngestionJob:
    source = Source.objects.get_or_create(tenant=tenant, name="uploads", defaults={"kind": Source.Kind.UPLOAD})[0]
    return IngestionJob.objects.create(
        tenant=tenant, source=source, file_name=name, stored_path=f"/nowhere/{name}", status=status
    )


def test_an_editor_uploads_two_files_in_one_post_and_sees_both_jobs_done(
    client, tenant, editor, django_capture_on_commit_callbacks
):
    client.force_login(editor)
    with django_capture_on_commit_callbacks(execute=True):
        response = client.post(
            SOURCES, {"files": [md("onboarding.md", ONBOARDING), md("parking.md", PARKING)], "new_source": "handouts"}
        )
    assert response.status_code == 302
    ids = job_ids(response["Location"])
    jobs = IngestionJob.objects.filter(pk__in=ids).order_by("pk")
    assert [(j.file_name, j.status) for j in jobs] == [("onboarding.md", "done"), ("parking.md", "done")]

    page = client.get(response["Location"]).content.decode()
    assert page.count("1 document (1 new), ") == 2
    assert "onboarding.md" in page and "parking.md" in page
    assert POLLING not in page and "Refresh" not in page  # nothing left to wait for
    assert 'name="files"' in page and inline_code(page) == []  # the form and the jobs fit the CSP
    documents = Document.objects.for_tenant(tenant).filter(source__name="handouts")
    assert sorted(documents.values_list("title", flat=True)) == ["Onboarding", "Parking"]
    assert documents.first().source.kind == Source.Kind.UPLOAD
    handouts = next(s for s in client.get(SOURCES).context["sources"] if s.name == "handouts")
    assert handouts.document_count == 2


def test_the_form_offers_the_upload_sources_and_adds_files_to_the_one_picked(
    client, tenant, editor, django_capture_on_commit_callbacks
):
    SourceFactory(tenant=tenant, name="manuals", kind=Source.Kind.UPLOAD)
    SourceFactory(tenant=tenant, name="wiki", kind=Source.Kind.FOLDER, location="/srv/wiki")
    client.force_login(editor)
    form = client.get(SOURCES).context["upload_form"]
    assert [value for value, _ in form.fields["source"].choices] == ["manuals", ""]  # never the folder

    with django_capture_on_commit_callbacks(execute=True):
        response = client.post(SOURCES, {"files": [md("onboarding.md", ONBOARDING)], "source": "manuals"})
    assert response.status_code == 302
    assert Document.objects.for_tenant(tenant).get().source.name == "manuals"


@pytest.mark.parametrize("fields", [{"new_source": "wiki"}, {"source": "wiki"}])
def test_files_never_go_into_a_connector_source(client, tenant, editor, fields):
    SourceFactory(tenant=tenant, name="wiki", kind=Source.Kind.FOLDER, location="/srv/wiki")
    client.force_login(editor)
    response = client.post(SOURCES, {"files": [md("onboarding.md", ONBOARDING)], **fields})
    assert response.status_code == 400
    html = response.content.decode()
    assert "does not take uploads" in html or "Select a valid choice" in html
    assert not IngestionJob.objects.exists()


def test_an_upload_source_hidden_from_the_editor_is_neither_offered_nor_written_to_nor_its_jobs_shown(
    client, tenant, editor
):
    board = SourceFactory(tenant=tenant, name="board", kind=Source.Kind.UPLOAD)
    AccessRule.objects.create(tenant=tenant, source=board, user=MembershipFactory(tenant=tenant).user)
    DocumentVersionFactory(document__source=board, document__title="Minutes")  # what the rule hides
    minutes = IngestionJob.objects.create(tenant=tenant, source=board, file_name="minutes.md", stored_path="/nowhere")
    client.force_login(editor)

    page = client.get(f"{SOURCES}?jobs={minutes.pk}")
    assert [value for value, _ in page.context["upload_form"].fields["source"].choices] == [""]
    assert "minutes.md" not in page.content.decode()
    response = client.post(SOURCES, {"files": [md("onboarding.md", ONBOARDING)], "new_source": "board"})
    assert response.status_code == 400
    assert "does not take uploads" in response.content.decode()  # the words a folder source gets
    assert IngestionJob.objects.count() == 1


def test_a_refused_file_shows_its_message_and_the_good_file_of_the_same_post_is_stored(
    client, tenant, editor, django_capture_on_commit_callbacks
):
    client.force_login(editor)
    files = [
        md("onboarding.md", ONBOARDING),
        SimpleUploadedFile("setup.exe", b"MZ\x90\x00binary"),
        md("empty.md", b""),
    ]
    with django_capture_on_commit_callbacks(execute=True):
        response = client.post(SOURCES, {"files": files, "new_source": "handouts"}, follow=True)
    html = response.content.decode()
    assert response.redirect_chain[-1][1] == 302
    assert "setup.exe: unsupported file type .exe" in html
    assert "empty.md: the file is empty." in html
    assert [job.file_name for job in IngestionJob.objects.all()] == ["onboarding.md"]
    assert Document.objects.for_tenant(tenant).get().title == "Onboarding"


def test_a_file_over_the_limit_stops_the_whole_post_and_the_form_says_why_with_csrf_checked(
    tenant, editor, settings, upload_dir
):
    """The CSRF middleware reads the body before the view: the refusal must reach the form, not
    be a 500 or a CSRF failure."""
    from django.test import Client

    settings.KB_MAX_UPLOAD_BYTES = 2000
    client = Client(enforce_csrf_checks=True)
    client.force_login(editor)
    client.get(SOURCES)  # sets the CSRF cookie
    token = client.cookies["csrftoken"].value
    files = [md("onboarding.md", ONBOARDING), md("huge.md", b"# Huge\n\n" + b"word " * 1000)]
    response = client.post(SOURCES, {"csrfmiddlewaretoken": token, "files": files, "new_source": "handouts"})
    assert response.status_code == 400
    html = response.content.decode()
    assert "huge.md: the file is larger than 2,000 bytes (the limit for one file). Nothing was uploaded." in html
    assert not IngestionJob.objects.exists() and not Source.objects.filter(name="handouts").exists()
    assert not upload_dir.exists() or not any(upload_dir.rglob("*.*"))


def test_when_every_file_is_refused_the_form_comes_back_with_the_reasons(client, tenant, editor):
    client.force_login(editor)
    response = client.post(SOURCES, {"files": [md("empty.md", b"")], "new_source": "handouts"})
    assert response.status_code == 400
    html = response.content.decode()
    assert "empty.md: the file is empty." in html
    assert "None of the files was uploaded." in html
    assert 'value="handouts"' in html  # the name typed is kept
    assert not Source.objects.filter(name="handouts").exists()


def test_a_post_without_files_asks_for_one(client, tenant, editor):
    client.force_login(editor)
    response = client.post(SOURCES, {"new_source": "handouts"})
    assert response.status_code == 400
    assert "Choose at least one file to upload." in response.content.decode()


@pytest.mark.parametrize("role", [Membership.Role.MEMBER, Membership.Role.VIEWER])
def test_a_member_below_editor_gets_no_upload_form_and_a_post_is_forbidden(client, tenant, role):
    user = MembershipFactory(tenant=tenant, role=role).user
    client.force_login(user)
    page = client.get(SOURCES)
    assert page.status_code == 200
    assert 'name="files"' not in page.content.decode()

    response = client.post(SOURCES, {"files": [md("onboarding.md", ONBOARDING)], "new_source": "handouts"})
    assert response.status_code == 403
    assert not IngestionJob.objects.exists()
    assert not Source.objects.filter(name="handouts").exists()


def test_the_job_list_polls_while_a_job_is_pending_and_not_once_all_are_done(client, tenant, member):
    done = pending_job(tenant, "early.md", status=IngestionJob.Status.DONE)
    waiting = pending_job(tenant, "later.md")
    client.force_login(member)
    query = f"?jobs={done.pk},{waiting.pk}"

    fragment = client.get(JOBS + query, **HX)
    html = fragment.content.decode()
    assert fragment.status_code == 200 and "<header" not in html
    assert POLLING in html and 'hx-swap="outerHTML"' in html
    assert f'hx-get="{JOBS}?jobs={done.pk},{waiting.pk}"' in html
    assert "Waiting for a worker" in html
    assert f'<a href="{SOURCES}{query}">Refresh</a>' in html  # without JavaScript
    page = client.get(SOURCES + query).content.decode()
    assert POLLING in page and '<noscript><meta http-equiv="refresh" content="3"></noscript>' in page
    assert inline_code(page) == [] and inline_code(html) == []

    IngestionJob.objects.filter(pk=waiting.pk).update(status=IngestionJob.Status.FAILED, error="Broken file.")
    html = client.get(JOBS + query, **HX).content.decode()
    assert "Broken file." in html
    assert "hx-trigger" not in html and "hx-get" not in html and "Refresh" not in html
    assert f'<a href="{SOURCES}{query}">Reload the page</a>' in html  # for the sources' new counts
    page = client.get(SOURCES + query).content.decode()
    assert POLLING not in page and "http-equiv" not in page


def test_the_job_list_without_htmx_is_the_sources_page(client, tenant, member):
    job = pending_job(tenant)
    client.force_login(member)
    response = client.get(f"{JOBS}?jobs={job.pk}")
    assert response.status_code == 302
    assert response["Location"] == f"{SOURCES}?jobs={job.pk}"


def test_another_tenants_job_is_never_shown(client, tenant, member, other_tenant_corpus):
    own = pending_job(tenant, "ours.md")
    theirs = pending_job(other_tenant_corpus, "theirs.md")
    client.force_login(member)

    page = client.get(f"{SOURCES}?jobs={theirs.pk},{own.pk}").content.decode()
    assert "ours.md" in page and "theirs.md" not in page
    assert f'hx-get="{JOBS}?jobs={own.pk}"' in page  # the list polls for the tenant's own job only
    assert client.get(f"{JOBS}?jobs={theirs.pk}", **HX).status_code == 404
    assert "theirs.md" not in client.get(f"{JOBS}?jobs={theirs.pk},{own.pk}", **HX).content.decode()


def test_the_sources_page_shows_each_sources_kind_and_a_synced_sources_last_sync(client, tenant, member):
    wiki = SourceFactory(
        tenant=tenant,
        name="wiki",
        kind=Source.Kind.FOLDER,
        location="/srv/wiki",
        last_synced_at=datetime(2026, 3, 4, 5, 6, tzinfo=UTC),
    )
    SyncRun.objects.create(tenant=tenant, source=wiki, status=SyncRun.Status.FAILED, error="Old failure.")
    SyncRun.objects.create(
        tenant=tenant, source=wiki, status=SyncRun.Status.DONE, new=3, updated=1, unchanged=5, deleted=2
    )
    site = SourceFactory(tenant=tenant, name="site", kind=Source.Kind.WEB, location="https://example.org/")
    SyncRun.objects.create(tenant=tenant, source=site, status=SyncRun.Status.FAILED, error="The site did not answer.")
    SourceFactory(tenant=tenant, name="handbook", kind=Source.Kind.FILES)
    client.force_login(member)

    html = client.get(SOURCES).content.decode()
    rows = dict(re.findall(r'<th scope="row">([^<]+)</th>(.*?)</tr>', html, flags=re.S))
    assert "Folder" in rows["wiki"] and "2026-03-04" in rows["wiki"]
    assert "Done: 3 new, 1 updated, 5 unchanged, 2 deleted" in rows["wiki"]
    assert "Old failure." not in rows["wiki"]  # the last run only
    assert "Web site" in rows["site"] and "never synced" in rows["site"]
    assert "Failed: The site did not answer." in rows["site"]
    assert "Files" in rows["handbook"] and "not synced" in rows["handbook"]


def test_the_sources_page_names_what_the_last_sync_could_not_read(client, tenant, member):
    wiki = SourceFactory(tenant=tenant, name="wiki", kind=Source.Kind.FOLDER, location="/srv/wiki")
    notes = [{"document": "scan.pdf", "error": "pages 11-40 not read (OCR budget 10 pages)"}]
    notes += [{"document": f"broken-{n}.docx", "error": "The file is damaged."} for n in range(6)]
    SyncRun.objects.create(tenant=tenant, source=wiki, status=SyncRun.Status.DONE, new=3, failed=6, errors=notes)
    client.force_login(member)

    html = client.get(SOURCES).content.decode()
    row = dict(re.findall(r'<th scope="row">([^<]+)</th>(.*?)</tr>', html, flags=re.S))["wiki"]
    assert "scan.pdf: pages 11-40 not read (OCR budget 10 pages)" in row
    assert "broken-3.docx: The file is damaged." in row and "broken-5.docx" not in row
    assert "and 2 more" in row


def test_a_submission_over_the_request_limit_is_refused_before_its_files_are_read_and_the_form_says_why(
    tenant, editor, settings, upload_dir
):
    from django.test import Client

    settings.KB_MAX_UPLOAD_REQUEST_BYTES = 4096  # each file is under the per-file limit; together they are not
    client = Client(enforce_csrf_checks=True)
    client.force_login(editor)
    client.get(SOURCES)
    token = client.cookies["csrftoken"].value
    files = [md(f"part{n}.md", b"# Part\n\n" + b"word " * 300) for n in range(3)]
    response = client.post(SOURCES, {"csrfmiddlewaretoken": token, "files": files, "new_source": "handouts"})
    assert response.status_code == 400
    html = response.content.decode()
    assert (
        "the limit for one upload is 4,096 bytes. Send fewer or smaller files at a time. Nothing was uploaded." in html
    )
    assert not IngestionJob.objects.exists() and not upload_dir.exists()
