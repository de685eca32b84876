"""Security probes, replayed in one place: every input that once answered 500 or showed a
traceback, the hardened defaults, and the cross-tenant and XSS probes that already held.

Each probe asserts what a user or an attacker would see: a 4xx in the API's error shape (or the
portal's 404), never a 500, no traceback and no database message, and nothing stored by a
rejected upload. The Django test client re-raises a view's exception, so a probe that reached a
500 fails with that exception.
"""

import json
import os
import subprocess
import sys
from pathlib import Path
from urllib.parse import quote

import pytest
from django.contrib.auth.models import Permission
from django.core.cache import cache
from django.core.files.uploadedfile import SimpleUploadedFile
from django.db import connection
from django.urls import reverse
from rest_framework.test import APIClient

from core.models import Membership, Tenant
from knowledge.ingestion.readers import ReadDocument
from knowledge.models import Chunk, Document, IngestionJob, Source, SyncRun
from knowledge.services import documents_ingest
from quality.models import ConfigChange
from retrieval.models import Trace
from tests.api.conftest import client_for, stored_counts
from tests.factories import MembershipFactory, SourceFactory, TenantFactory, UserFactory

ROOT = Path(__file__).resolve().parents[2]
ASK = reverse("portal:ask")
NOTE = b"# Onboarding\n\nNew starters get a laptop on their first day.\n\n## Accounts\n\nIT creates your account.\n"
DATABASE_WORDS = ("INSERT", "SELECT", "psycopg", "DataError", "violates", "Traceback", "character varying")


def upload(client, name, data, **fields):
    return client.post("/api/v1/documents/", {"file": SimpleUploadedFile(name, data), **fields}, format="multipart")


def assert_clean_4xx(response, status=400):
    """A client error in the API's error shape that shows no database message or traceback."""
    assert response.status_code == status, response.content[:500]
    error = response.json()["error"]
    assert error["code"] and error["message"]
    text = json.dumps(error)
    assert not any(word in text for word in DATABASE_WORDS), text


def nothing_stored(tenant, before, upload_dir) -> bool:
    """True when ``tenant`` has the same documents and jobs as ``before`` and no uploaded file is left."""
    leftover = upload_dir.exists() and any(p.is_file() for p in upload_dir.rglob("*"))
    return stored_counts(tenant) == before and not leftover


# --- Bad input gets a 4xx or a CLI message -------------------------------------------------


@pytest.mark.parametrize("query", ["limit=99999999999999999999", "offset=99999999999999999999", "limit=-1&offset=-5"])
def test_a_huge_or_negative_limit_and_offset_list_documents_instead_of_failing(corpus, member_client, query):
    response = member_client.get(f"/api/v1/documents/?{query}")
    assert response.status_code == 200
    assert len(response.json()["results"]) <= 3


@pytest.mark.parametrize(
    "path",
    ["/api/v1/search/", "/api/v1/ask/", "/api/v1/ask/stream/", "/api/v1/settings/retrieval/", "/api/v1/sources/"],
)
def test_a_json_body_nested_100000_levels_deep_is_a_400(corpus, admin_client, path):
    for body in ("[" * 100_000 + "]" * 100_000, '{"a":' * 100_000 + "1" + "}" * 100_000):
        response = admin_client.generic("POST", path, body, content_type="application/json")
        assert_clean_4xx(response)
        assert response.json()["error"]["code"] == "parse_error"


@pytest.mark.parametrize("version", ["²", "9" * 5000, "٣", "1e3", " 1", "0x1", "-1", "0"])
def test_a_portal_version_that_is_not_1_to_9_ascii_digits_is_not_found(client, corpus, member, version):
    client.force_login(member)
    pasta = Document.objects.for_tenant(corpus).get(external_id="recipes/pasta")
    response = client.get(reverse("portal:document", args=[pasta.pk]) + "?version=" + quote(version))
    assert response.status_code == 404
    assert b"Traceback" not in response.content


@pytest.mark.parametrize("value", ["2024-02-30", "2024-13-01T25:61:00"])
def test_an_impossible_jsonl_date_in_an_upload_is_a_400_naming_the_line(corpus, editor_client, upload_dir, value):
    before = stored_counts(corpus)
    data = b'{"id": "a", "text": "ok"}\n' + json.dumps({"id": "b", "text": "ok", "published_at": value}).encode()
    response = upload(editor_client, "docs.jsonl", data)
    assert_clean_4xx(response)
    assert f"docs.jsonl, line 2: invalid date '{value}'" in response.json()["error"]["message"]
    assert nothing_stored(corpus, before, upload_dir)


def manage_py(*args: str) -> subprocess.CompletedProcess:
    """``manage.py`` in a child process, on the test database (committed data only)."""
    db = connection.settings_dict
    url = f"postgresql://{db['USER']}@{quote(db['HOST'], safe='')}:{db['PORT']}/{db['NAME']}"
    env = {**os.environ, "DATABASE_URL": url, "DJANGO_SETTINGS_MODULE": "config.settings"}
    return subprocess.run(
        [sys.executable, "manage.py", *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300
    )


@pytest.mark.parametrize("value", ["2024-02-30", "2024-13-01T25:61:00"])
def test_manage_py_ingest_stops_on_an_impossible_date_with_a_message_naming_the_line(transactional_db, tmp_path, value):
    tenant = TenantFactory(slug="cli-probe")
    SourceFactory(tenant=tenant, name="notes")
    rows = [{"id": "a", "text": "A fine first line."}, {"id": "b", "text": "ok", "published_at": value}]
    (tmp_path / "docs.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))

    result = manage_py("ingest", "--tenant", tenant.slug, "--source", "notes", str(tmp_path / "docs.jsonl"))

    assert result.returncode != 0
    assert "Traceback" not in result.stderr and "Traceback" not in result.stdout
    assert f"docs.jsonl, line 2: invalid date '{value}'" in result.stderr
    assert not Document.objects.filter(tenant=tenant).exists()


def test_a_300_cjk_character_file_name_is_stored_within_the_file_system_limit(
    tenant, editor_client, upload_dir, django_capture_on_commit_callbacks
):
    with django_capture_on_commit_callbacks(execute=True):
        response = upload(editor_client, "文" * 300 + ".md", NOTE)
    assert response.status_code == 202
    assert editor_client.get(response.json()["urls"]["self"]).json()["status"] == "done"
    stored = IngestionJob.objects.get(pk=response.json()["id"]).stored_path
    assert len(os.path.basename(stored).encode()) <= 200


def test_a_rejected_upload_with_a_300_cjk_character_name_leaves_no_folder(corpus, editor_client, upload_dir):
    before = stored_counts(corpus)
    assert_clean_4xx(upload(editor_client, "文" * 300 + ".md", b""))
    assert nothing_stored(corpus, before, upload_dir)
    assert not upload_dir.exists() or not any(upload_dir.rglob("*"))


UNSTORABLE_ROWS = {
    "NUL in the title": {"id": "a", "title": "Ti\x00tle", "text": "ok"},
    "NUL in a metadata field": {"id": "a", "text": "ok", "team": {"name": "x\x00"}},
    "NUL in a metadata key": {"id": "a", "text": "ok", "bad\x00key": 1},
    "NUL in the text": {"id": "a", "text": "o\x00k"},
    "an id over 1,000 characters": {"id": "i" * 1001, "text": "ok"},
    "a uri over 2,000 characters": {"id": "a", "uri": "https://x/" + "u" * 1991, "text": "ok"},
}


@pytest.mark.parametrize("row", UNSTORABLE_ROWS.values(), ids=UNSTORABLE_ROWS.keys())
def test_jsonl_the_database_cannot_store_is_refused_before_anything_is_stored(
    corpus, editor_client, upload_dir, django_capture_on_commit_callbacks, row
):
    before = stored_counts(corpus)
    data = b'{"id": "first", "text": "A fine first line."}\n' + json.dumps(row).encode() + b"\n"
    with django_capture_on_commit_callbacks(execute=True) as callbacks:
        response = upload(editor_client, "docs.jsonl", data)
    assert_clean_4xx(response)
    assert "docs.jsonl, line 2" in response.json()["error"]["message"]
    assert not callbacks  # no job was queued
    assert nothing_stored(corpus, before, upload_dir)
    assert not Source.objects.for_tenant(corpus).filter(name="uploads").exists()


@pytest.mark.parametrize(
    "config",
    [{"fusion": "best"}, {"pipeline": "magic"}, {"rrf_k": 0}, {"unknown_key": 1}, {"fusion": None}, [], "x", 5],
)
def test_a_bad_retrieval_config_is_a_400_from_the_api_and_nothing_changes(corpus, admin_client, config):
    response = admin_client.post("/api/v1/settings/retrieval/", {"config": config}, format="json")
    assert_clean_4xx(response)
    corpus.refresh_from_db()
    assert corpus.retrieval_config == {} and not ConfigChange.objects.exists()
    assert admin_client.post("/api/v1/search/", {"query": "pasta"}, format="json").status_code == 200


@pytest.fixture
def tenant_staff(corpus, admin_member):
    admin_member.user_permissions.add(*Permission.objects.filter(codename__startswith="view_"))
    admin_member.user_permissions.add(*Permission.objects.filter(codename__in=["add_configchange", "change_tenant"]))
    return admin_member


@pytest.mark.parametrize(("config", "message"), [("{nope", "Not valid JSON"), ('{"fusion": "best"}', "Unknown fusion")])
def test_a_bad_retrieval_config_in_the_admin_is_a_form_error_and_nothing_changes(
    client, corpus, tenant_staff, config, message
):
    client.force_login(tenant_staff)
    response = client.post(reverse("admin:quality_configchange_propose"), {"config": config})
    assert response.status_code == 200 and message in response.content.decode()
    corpus.refresh_from_db()
    assert corpus.retrieval_config == {} and not ConfigChange.objects.exists()


def test_a_superuser_adding_a_tenant_cannot_set_its_retrieval_config_past_the_gate(client, db):
    superuser = UserFactory(is_staff=True, is_superuser=True)
    client.force_login(superuser)
    form = {"slug": "bad-config", "name": "Bad", "embedder": "local", "retrieval_config": '{"fusion": "best"}'}
    response = client.post(reverse("admin:core_tenant_add"), form)
    assert response.status_code == 302
    assert Tenant.objects.get(slug="bad-config").retrieval_config == {}  # set through the gate only
    search = client_for(MembershipFactory(tenant=Tenant.objects.get(slug="bad-config")).user)
    assert search.post("/api/v1/search/", {"query": "anything"}, format="json").status_code == 200


def test_utf16_text_is_accepted(tenant, editor_client, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=True):
        response = upload(editor_client, "notes.md", NOTE.decode().encode("utf-16"))
    assert response.status_code == 202
    assert editor_client.get(response.json()["urls"]["self"]).json()["status"] == "done"
    assert Document.objects.get(tenant=tenant, external_id="notes.md").title == "Onboarding"


def test_a_literal_bracketed_number_in_a_document_is_not_a_citation_link(client, tenant, source, member):
    text = "Boiling\n\nAs table [2] shows, spaghetti boils for ten minutes [7] in salted water."
    documents_ingest(
        tenant=tenant, source=source, documents=[ReadDocument(external_id="b", title="Boiling", text=text)]
    )
    client.force_login(member)
    html = client.post(ASK, {"question": "how long does spaghetti boil"}).content.decode()
    assert "ten minutes" in html
    answer = html.split('<div class="answer">', 1)[1].split("</div>", 1)[0]
    links = answer.count('<a class="cite"')
    assert links >= 1 and ">[2]</a>" not in answer and ">[7]</a>" not in answer


# --- Hardened defaults ---------------------------------------------------------------------


def test_an_uploaded_documents_uri_is_its_file_name_never_the_server_path(
    tenant, editor_client, upload_dir, django_capture_on_commit_callbacks
):
    with django_capture_on_commit_callbacks(execute=True):
        response = upload(editor_client, "../../evil name.md", NOTE)
    assert response.status_code == 202
    document = Document.objects.get(tenant=tenant)
    assert document.uri == IngestionJob.objects.get().file_name
    assert "/" not in document.uri and str(upload_dir) not in document.uri
    detail = editor_client.get(f"/api/v1/documents/{document.pk}/").content.decode()
    assert str(upload_dir) not in detail and str(ROOT) not in detail


@pytest.mark.parametrize("url", ["/api/schema/", "/api/docs/", "/api/docs/?script="])
def test_the_api_schema_and_docs_need_a_signed_in_caller(db, url):
    response = APIClient().get(url)
    assert response.status_code in (401, 403)
    assert b"/api/v1/documents/" not in response.content


@pytest.fixture
def fresh_throttles():
    cache.clear()  # DRF's throttles count requests in the default cache
    yield
    cache.clear()


def test_anonymous_api_callers_are_rate_limited(db, monkeypatch, fresh_throttles):
    from drf_spectacular.views import SpectacularAPIView
    from rest_framework.permissions import AllowAny
    from rest_framework.throttling import SimpleRateThrottle

    # As with KB_PUBLIC_API_DOCS=true and KB_API_ANON_RATE=3/min.
    monkeypatch.setattr(SpectacularAPIView, "permission_classes", [AllowAny])
    monkeypatch.setattr(SimpleRateThrottle, "THROTTLE_RATES", {"anon": "3/min", "user": "600/min"})
    codes = [APIClient().get("/api/schema/").status_code for _ in range(4)]
    assert codes == [200, 200, 200, 429]


def test_the_default_anonymous_rate_is_sixty_a_minute(settings):
    assert settings.REST_FRAMEWORK["DEFAULT_THROTTLE_RATES"]["anon"] == "60/min"


# --- Tenant isolation: tenant B with tenant A's ids ------------------------------------------


@pytest.fixture
def tenant_a(corpus, admin_member, django_capture_on_commit_callbacks):
    """Tenant A (``corpus``) with a document, an upload job, an answer trace and a settings change."""
    a_client = client_for(admin_member)
    with django_capture_on_commit_callbacks(execute=True):
        job = upload(a_client, "a-private.md", b"# A private\n\nThe vault code of tenant A is 4711.\n").json()
    answer = a_client.post("/api/v1/ask/", {"question": "how long to cook pasta"}, format="json").json()
    change = a_client.post("/api/v1/settings/retrieval/", {"config": {"fusion": "rrf"}}, format="json").json()
    document = Document.objects.get(tenant=corpus, external_id="a-private.md")
    source = Source.objects.get(tenant=corpus, name="uploads")
    run = SyncRun.objects.create(tenant=corpus, source=source, status=SyncRun.Status.DONE, new=1)
    return {
        "tenant": corpus,
        "document": document.pk,
        "version": document.versions.get().number,
        "chunk": Chunk.objects.filter(version__document=document).first().pk,
        "job": job["id"],
        "trace": answer["trace_id"],
        "change": change["id"],
        "source": source.pk,
        "run": run.pk,
    }


@pytest.fixture
def tenant_b_admin(db):
    """An admin and staff user of another tenant, with every admin view permission."""
    other = TenantFactory(slug="tenant-b")
    membership = MembershipFactory(tenant=other, role=Membership.Role.ADMIN)
    membership.user.is_staff = True
    membership.user.save()
    membership.user.user_permissions.add(*Permission.objects.filter(codename__startswith="view_"))
    membership.user.user_permissions.add(*Permission.objects.filter(codename__startswith="delete_"))
    return membership.user


def test_tenant_b_cannot_read_or_delete_tenant_as_objects_through_any_api_endpoint(tenant_a, tenant_b_admin):
    b = client_for(tenant_b_admin)
    probes = [
        ("get", f"/api/v1/documents/{tenant_a['document']}/"),
        ("get", f"/api/v1/documents/{tenant_a['document']}/versions/{tenant_a['version']}/figures/0.png"),
        ("delete", f"/api/v1/documents/{tenant_a['document']}/"),
        ("get", f"/api/v1/jobs/{tenant_a['job']}/"),
        ("get", f"/api/v1/traces/{tenant_a['trace']}/"),
        ("get", f"/api/v1/settings/retrieval/changes/{tenant_a['change']}/"),
        ("post", f"/api/v1/settings/retrieval/changes/{tenant_a['change']}/override/"),
        ("get", f"/api/v1/sources/{tenant_a['source']}/"),
        ("patch", f"/api/v1/sources/{tenant_a['source']}/"),
        ("delete", f"/api/v1/sources/{tenant_a['source']}/"),
        ("post", f"/api/v1/sources/{tenant_a['source']}/sync/"),
        ("get", f"/api/v1/sources/{tenant_a['source']}/runs/"),
        ("get", f"/api/v1/sources/{tenant_a['source']}/runs/{tenant_a['run']}/"),
    ]
    for method, url in probes:
        response = getattr(b, method)(url)
        assert response.status_code == 404, (method, url, response.status_code)
        assert b"4711" not in response.content and b"a-private" not in response.content
    listed = b.get("/api/v1/documents/?limit=1000").json()
    assert listed["count"] == 0
    assert b.get("/api/v1/sources/").json()["count"] == 0
    assert Document.objects.filter(pk=tenant_a["document"]).exists()
    assert Source.objects.filter(pk=tenant_a["source"]).exists()


def test_tenant_b_search_and_ask_never_return_tenant_as_chunks(tenant_a, tenant_b_admin):
    b = client_for(tenant_b_admin)
    for mode in ("hybrid", "lexical", "dense"):
        response = b.post(
            "/api/v1/search/", {"query": "vault code of tenant A 4711", "k": 50, "mode": mode}, format="json"
        )
        assert response.status_code == 200 and response.json()["results"] == [], mode
    for path in ("/api/v1/ask/", "/api/v1/ask/stream/"):
        response = b.post(path, {"question": "What is the vault code of tenant A?"}, format="json")
        body = b"".join(response.streaming_content) if response.streaming else response.content
        assert response.status_code == 200 and b"4711" not in body, path
    response = b.post("/api/v1/search/", {"query": "vault", "sources": ["uploads", "handbook"]}, format="json")
    assert response.status_code in (200, 400) and b"4711" not in response.content


def test_tenant_b_portal_pages_with_tenant_as_ids_are_not_found(client, tenant_a, tenant_b_admin):
    client.force_login(tenant_b_admin)
    document = reverse("portal:document", args=[tenant_a["document"]])
    figure = reverse("portal:document-figure", args=[tenant_a["document"], tenant_a["version"], 0])
    for url in (document, f"{document}?version={tenant_a['version']}", figure):
        response = client.get(url)
        assert response.status_code == 404 and b"4711" not in response.content
    response = client.post(ASK, {"question": "What is the vault code of tenant A?"})
    assert response.status_code == 200 and b"4711" not in response.content


def test_tenant_b_staff_cannot_open_tenant_as_objects_in_the_admin(client, tenant_a, tenant_b_admin):
    client.force_login(tenant_b_admin)
    probes = {
        "knowledge_document": tenant_a["document"],
        "knowledge_chunk": tenant_a["chunk"],
        "knowledge_ingestionjob": tenant_a["job"],
        "core_tenant": tenant_a["tenant"].pk,
        "retrieval_trace": tenant_a["trace"],
        "quality_configchange": tenant_a["change"],
    }
    for model, pk in probes.items():
        for view in ("change", "delete"):
            response = client.get(reverse(f"admin:{model}_{view}", args=[pk]))
            assert response.status_code in (302, 403, 404), (model, view, response.status_code)
            assert b"4711" not in response.content
        listing = client.get(reverse(f"admin:{model}_changelist"))
        assert (
            listing.status_code in (200, 403) and b"4711" not in listing.content and b"a-private" not in listing.content
        )
    assert Document.objects.filter(pk=tenant_a["document"]).exists()
    assert Trace.objects.filter(pk=tenant_a["trace"]).exists()
    assert Tenant.objects.filter(pk=tenant_a["tenant"].pk).exists()


# --- XSS: markup in documents is shown as text ---------------------------------------------------

XSS_TITLE = '"><img src=x onerror=alert(1)>'
XSS_TEXT = 'Boiling <script>alert(1)</script>\n\nTo boil spaghetti "><img src=x onerror=alert(2)> takes ten minutes.'


@pytest.fixture
def hostile_document(tenant, source):
    documents_ingest(
        tenant=tenant,
        source=source,
        documents=[ReadDocument(external_id="x<script>", title=XSS_TITLE, text=XSS_TEXT, uri='javascript:alert(3)"')],
    )
    return Document.objects.for_tenant(tenant).get()


def assert_escaped(html: str) -> None:
    assert "<img src=x" not in html and "<script>alert" not in html
    assert "onerror=alert" not in html or "&lt;img src=x onerror=alert" in html
    assert 'href="javascript:' not in html


def test_markup_in_a_document_is_escaped_on_the_answer_citation_and_document_pages(client, hostile_document, member):
    client.force_login(member)
    answer = client.post(ASK, {"question": "how long to boil spaghetti"}).content.decode()
    assert "ten minutes" in answer and "&lt;script&gt;alert(1)&lt;/script&gt;" in answer
    assert "&quot;&gt;&lt;img src=x onerror=alert(1)&gt;" in answer  # the citation's title
    assert_escaped(answer)

    page = client.get(reverse("portal:document", args=[hostile_document.pk])).content.decode()
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    assert_escaped(page)


def test_markup_in_a_document_is_escaped_in_the_streamed_answer(transactional_db, client, hostile_document, member):
    # The streamed run uses its own database connection in a worker thread: transactional_db.
    client.force_login(member)
    streamed = client.post(reverse("portal:ask-stream"), {"question": "how long to boil spaghetti"})
    body = b"".join(streamed.streaming_content).decode()
    events = [json.loads(line[6:]) for line in body.splitlines() if line.startswith("data: ")]
    html = "".join(e.get("html", "") for e in events if isinstance(e, dict))
    assert "ten minutes" in html
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html
    assert_escaped(html)


def test_markup_in_a_document_is_returned_as_plain_json_text_by_the_api(hostile_document, member):
    body = client_for(member).post("/api/v1/ask/", {"question": "how long to boil spaghetti"}, format="json")
    assert body["Content-Type"] == "application/json"
    assert XSS_TITLE in [c["title"] for c in body.json()["citations"]]


def test_a_user_with_markup_in_the_name_is_escaped_in_the_portal_header(client, tenant):
    user = UserFactory(username="<b>bold</b>")
    MembershipFactory(tenant=tenant, user=user)
    client.force_login(user)
    html = client.get(ASK).content.decode()
    assert "&lt;b&gt;bold&lt;/b&gt;" in html and "<b>bold</b>" not in html
