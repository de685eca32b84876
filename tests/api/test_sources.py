"""The sources API: admins create, change, delete and sync sources; members read them and their runs."""

import pytest

from core.models import Membership
from knowledge.access import access_rule_grant
from knowledge.ingestion.readers import ReadDocument
from knowledge.models import Document, Source, SyncRun
from knowledge.services import documents_ingest
from tests.api.conftest import client_for
from tests.factories import MembershipFactory, SourceFactory, folder_granted

TEA = "# Green tea\n\nSteep green tea for two minutes in water just below boiling.\n"
BREAD = "# Sourdough bread\n\nFeed the starter the night before, then knead and let the dough rise.\n"


@pytest.fixture
def folder(tmp_path, tenant):
    """A folder holding two small Markdown files, in a folder the operator granted to ``tenant``."""
    folder_granted(tenant, tmp_path / "shared")
    root = tmp_path / "shared" / "notes"
    root.mkdir(parents=True)
    (root / "tea.md").write_text(TEA)
    (root / "bread.md").write_text(BREAD)
    return root


@pytest.fixture
def folder_source(tenant, folder) -> Source:
    return Source.objects.create(tenant=tenant, name="notes", kind=Source.Kind.FOLDER, location=str(folder))


@pytest.fixture
def other_source(other_tenant_corpus) -> Source:
    return other_tenant_corpus.sources.get()


def sync(client, source_id: int, capture):
    """POST a sync, running the queued task at commit as it runs without a broker."""
    with capture(execute=True):
        return client.post(f"/api/v1/sources/{source_id}/sync/")


def document_ids(client) -> set[str]:
    return {d["external_id"] for d in client.get("/api/v1/documents/?limit=200").json()["results"]}


def test_an_admin_creates_a_folder_source_syncs_it_and_follows_its_runs(
    tenant, admin_client, folder, django_capture_on_commit_callbacks
):
    response = admin_client.post(
        "/api/v1/sources/",
        {"name": "notes", "kind": "folder", "location": str(folder), "sync_every": "1h"},
        format="json",
    )
    assert response.status_code == 201, response.json()
    created = response.json()
    assert created["kind"] == "folder" and created["location"] == str(folder)
    assert created["sync_every"] == 3600
    assert created["document_count"] == 0 and created["last_run"] is None

    response = sync(admin_client, created["id"], django_capture_on_commit_callbacks)
    assert response.status_code == 202
    run = response.json()
    assert response["Location"] == f"/api/v1/sources/{created['id']}/runs/{run['id']}/"

    runs = admin_client.get(f"/api/v1/sources/{created['id']}/runs/").json()["results"]
    assert [(r["id"], r["status"], r["new"], r["trigger"]) for r in runs] == [(run["id"], "done", 2, "manual")]
    assert admin_client.get(response["Location"]).json()["status"] == "done"
    assert document_ids(admin_client) == {"tea", "bread"}
    detail = admin_client.get(f"/api/v1/sources/{created['id']}/").json()
    assert detail["document_count"] == 2
    assert detail["last_run"]["status"] == "done" and detail["last_run"]["counts"]["new"] == 2
    assert detail["last_synced_at"] is not None


def test_a_second_sync_counts_the_edited_file_as_updated_and_the_removed_one_as_deleted(
    folder_source, folder, admin_client, django_capture_on_commit_callbacks
):
    sync(admin_client, folder_source.pk, django_capture_on_commit_callbacks)
    (folder / "tea.md").write_text(TEA + "\nA second steeping takes three minutes.\n")
    (folder / "bread.md").unlink()

    sync(admin_client, folder_source.pk, django_capture_on_commit_callbacks)

    newest, first = admin_client.get(f"/api/v1/sources/{folder_source.pk}/runs/").json()["results"]
    assert (first["new"], first["status"]) == (2, "done")
    assert (newest["updated"], newest["deleted"], newest["new"], newest["status"]) == (1, 1, 0, "done")
    assert document_ids(admin_client) == {"tea"}
    assert admin_client.get(f"/api/v1/sources/{folder_source.pk}/").json()["document_count"] == 1


def test_a_member_may_list_and_read_sources_but_not_create_change_delete_or_sync_them(
    folder_source, member_client, folder
):
    listed = member_client.get("/api/v1/sources/").json()
    assert [s["name"] for s in listed["results"]] == ["notes"]
    assert set(listed["results"][0]) == {
        "id", "name", "kind", "location", "branch", "include", "exclude", "text_format", "uri_prefix",
        "page_limit", "crawl_delay_s", "sync_every", "reliability", "half_life_days", "versions_kept",
        "last_synced_at", "document_count", "last_run", "options", "perm_every", "last_perm_synced_at", "has_secret",
    }  # fmt: skip
    assert member_client.get(f"/api/v1/sources/{folder_source.pk}/").status_code == 200
    assert member_client.get(f"/api/v1/sources/{folder_source.pk}/runs/").json()["results"] == []

    refused = [
        member_client.post("/api/v1/sources/", {"name": "x", "kind": "folder", "location": str(folder)}),
        member_client.patch(f"/api/v1/sources/{folder_source.pk}/", {"reliability": 0.5}, format="json"),
        member_client.delete(f"/api/v1/sources/{folder_source.pk}/"),
        member_client.post(f"/api/v1/sources/{folder_source.pk}/sync/"),
    ]
    assert [r.status_code for r in refused] == [403] * 4
    assert "admins" in refused[0].json()["error"]["message"]
    assert Source.objects.filter(tenant=folder_source.tenant).count() == 1
    assert not SyncRun.objects.exists()


def test_an_editor_may_not_manage_sources_either(tenant, folder):
    editor = client_for(MembershipFactory(tenant=tenant, role=Membership.Role.EDITOR).user)
    response = editor.post("/api/v1/sources/", {"name": "x", "kind": "folder", "location": str(folder)})
    assert response.status_code == 403


def test_another_tenants_source_is_a_404_everywhere(
    folder_source, other_source, member_client, admin_client, django_capture_on_commit_callbacks
):
    run = SyncRun.objects.create(tenant=other_source.tenant, source=other_source, status=SyncRun.Status.DONE)
    base = f"/api/v1/sources/{other_source.pk}/"
    responses = {
        "detail": member_client.get(base),
        "runs": member_client.get(f"{base}runs/"),
        "run": member_client.get(f"{base}runs/{run.pk}/"),
        "sync": sync(admin_client, other_source.pk, django_capture_on_commit_callbacks),
        "patch": admin_client.patch(base, {"name": "mine now"}, format="json"),
        "delete": admin_client.delete(base),
    }
    assert {what: r.status_code for what, r in responses.items()} == dict.fromkeys(responses, 404)
    assert all(r.json()["error"]["code"] == "not_found" for r in responses.values())
    assert [s["name"] for s in member_client.get("/api/v1/sources/").json()["results"]] == ["notes"]
    other_source.refresh_from_db()
    assert other_source.name == "secret"
    assert list(SyncRun.objects.filter(source=other_source)) == [run]


def test_a_run_is_found_only_under_its_own_source(folder_source, tenant, member_client):
    run = SyncRun.objects.create(tenant=tenant, source=folder_source, status=SyncRun.Status.DONE)
    elsewhere = SourceFactory(tenant=tenant, name="elsewhere")
    assert member_client.get(f"/api/v1/sources/{folder_source.pk}/runs/{run.pk}/").status_code == 200
    assert member_client.get(f"/api/v1/sources/{elsewhere.pk}/runs/{run.pk}/").status_code == 404


@pytest.mark.parametrize(
    ("body", "words"),
    [
        ({"name": "site", "kind": "web", "location": "not a url"}, "http(s) URL"),
        ({"name": "odd", "kind": "carrier-pigeon", "location": "/tmp"}, "kind must be one of"),
        ({"name": "notes", "kind": "folder", "location": "{granted}/notes"}, "already has a source called"),
        ({"name": "soon", "kind": "folder", "location": "{granted}/soon", "sync_every": "soon"}, "sync_every"),
        (
            {"name": "tiny", "kind": "folder", "location": "{granted}/tiny", "sync_every": 5},
            "sync_every is at least 15m",
        ),
        ({"name": "huge", "kind": "folder", "location": "{granted}/huge", "sync_every": "99999999999d"}, "sync_every"),
        ({"name": "bare", "kind": "folder"}, "needs a location"),
        ({"name": "rel", "kind": "folder", "location": "notes/"}, "absolute path"),
        ({"name": "typo", "kind": "folder", "location": "{granted}/typo", "sync_evry": "1h"}, "sync_evry"),
        ({"name": "pages", "kind": "web", "location": "https://example.com/", "page_limit": 0}, "page_limit"),
    ],
)
def test_bad_input_is_a_400_with_a_message(folder_source, folder, admin_client, body, words):
    body = {key: value.format(granted=folder.parent) if key == "location" else value for key, value in body.items()}
    response = admin_client.post("/api/v1/sources/", body, format="json")
    assert response.status_code == 400
    assert words in str(response.json()["error"]["message"])
    assert list(Source.objects.filter(tenant=folder_source.tenant)) == [folder_source]


def test_sync_every_is_given_in_seconds_or_as_a_duration_and_shown_in_seconds(folder_source, admin_client):
    url = f"/api/v1/sources/{folder_source.pk}/"
    assert admin_client.patch(url, {"sync_every": "30m"}, format="json").json()["sync_every"] == 1800
    assert admin_client.patch(url, {"sync_every": 86400}, format="json").json()["sync_every"] == 86400
    assert admin_client.patch(url, {"sync_every": "7200"}, format="json").json()["sync_every"] == 7200
    assert admin_client.patch(url, {"sync_every": "²"}, format="json").status_code == 400
    assert admin_client.patch(url, {"sync_every": None}, format="json").json()["sync_every"] is None


def test_an_admin_changes_a_source_and_a_bad_change_saves_nothing(folder_source, admin_client):
    url = f"/api/v1/sources/{folder_source.pk}/"
    response = admin_client.patch(url, {"name": "kitchen", "include": ["*.md"], "reliability": 0.8}, format="json")
    assert response.status_code == 200
    assert (response.json()["name"], response.json()["include"], response.json()["reliability"]) == (
        "kitchen",
        ["*.md"],
        0.8,
    )
    response = admin_client.patch(url, {"name": "other", "location": "relative/path"}, format="json")
    assert response.status_code == 400
    folder_source.refresh_from_db()
    assert (folder_source.name, folder_source.include) == ("kitchen", ["*.md"])


def test_deleting_a_source_removes_its_documents(
    folder_source, admin_client, tenant, django_capture_on_commit_callbacks
):
    sync(admin_client, folder_source.pk, django_capture_on_commit_callbacks)
    assert document_ids(admin_client) == {"tea", "bread"}
    response = admin_client.delete(f"/api/v1/sources/{folder_source.pk}/")
    assert response.status_code == 204
    assert not Source.objects.filter(pk=folder_source.pk).exists()
    assert not Document.objects.for_tenant(tenant).exists()
    assert document_ids(admin_client) == set()


def test_syncing_a_source_filled_by_hand_is_a_400(tenant, admin_client, django_capture_on_commit_callbacks):
    files = SourceFactory(tenant=tenant, name="handbook", kind=Source.Kind.FILES)
    response = sync(admin_client, files.pk, django_capture_on_commit_callbacks)
    assert response.status_code == 400
    assert response.json()["error"]["code"] == "not_synced"
    assert "not synced" in response.json()["error"]["message"]


def test_a_restricted_source_is_left_out_for_a_member_not_granted_it(tenant, member_client, admin_client):
    board = SourceFactory(tenant=tenant, name="board")
    documents_ingest(
        tenant=tenant,
        source=board,
        documents=[ReadDocument(external_id="board/minutes", title="Minutes", text="Minutes\n\nThe board met.")],
    )
    SourceFactory(tenant=tenant, name="public")
    access_rule_grant(tenant=tenant, source=board, user=MembershipFactory(tenant=tenant).user)

    assert [s["name"] for s in member_client.get("/api/v1/sources/").json()["results"]] == ["public"]
    assert member_client.get(f"/api/v1/sources/{board.pk}/").status_code == 404
    assert member_client.get(f"/api/v1/sources/{board.pk}/runs/").status_code == 404
    assert [s["name"] for s in admin_client.get("/api/v1/sources/").json()["results"]] == ["board", "public"]


def test_the_runs_list_is_newest_first_and_limited(folder_source, tenant, member_client):
    runs = [SyncRun.objects.create(tenant=tenant, source=folder_source, status=SyncRun.Status.DONE) for _ in range(3)]
    body = member_client.get(f"/api/v1/sources/{folder_source.pk}/runs/?limit=2").json()
    assert body["count"] == 3
    assert [r["id"] for r in body["results"]] == [runs[2].pk, runs[1].pk]
    assert set(body["results"][0]) == {
        "id", "trigger", "status", "new", "updated", "unchanged", "deleted", "failed", "errors", "error",
        "progress", "created_at", "started_at", "finished_at", "scope", "permissions",
    }  # fmt: skip


def test_a_folder_that_is_gone_fails_the_run_with_the_reason_and_changes_nothing(
    tenant, admin_client, tmp_path, django_capture_on_commit_callbacks
):
    gone = Source.objects.create(
        tenant=tenant,
        name="gone",
        kind=Source.Kind.FOLDER,
        location=str(folder_granted(tenant, tmp_path / "shared") / "nowhere"),
    )
    response = sync(admin_client, gone.pk, django_capture_on_commit_callbacks)
    assert response.status_code == 202
    [run] = admin_client.get(f"/api/v1/sources/{gone.pk}/runs/").json()["results"]
    assert run["status"] == "failed" and "no such folder" in run["error"] and run["finished_at"]
    last = admin_client.get("/api/v1/sources/").json()["results"][0]["last_run"]
    assert (last["id"], last["status"], last["counts"]["new"]) == (run["id"], "failed", 0)
    assert last["error"] == run["error"]
    assert admin_client.get(f"/api/v1/sources/{gone.pk}/").json()["last_synced_at"] is None


def test_a_renamed_source_keeps_no_surrounding_spaces(folder_source, admin_client):
    response = admin_client.patch(f"/api/v1/sources/{folder_source.pk}/", {"name": "  kitchen  "}, format="json")
    assert response.json()["name"] == "kitchen"


def test_a_restricted_source_without_documents_yet_is_left_out_too(tenant, member_client, admin_client, folder):
    private = Source.objects.create(tenant=tenant, name="private", kind=Source.Kind.FOLDER, location=str(folder))
    access_rule_grant(tenant=tenant, source=private, user=MembershipFactory(tenant=tenant).user)
    assert member_client.get("/api/v1/sources/").json()["results"] == []
    assert member_client.get(f"/api/v1/sources/{private.pk}/").status_code == 404
    assert [s["name"] for s in admin_client.get("/api/v1/sources/").json()["results"]] == ["private"]


@pytest.mark.parametrize("query", ["limit=99999999999999999999", "offset=99999999999999999999", "limit=-1&offset=-5"])
def test_a_huge_or_negative_limit_lists_sources_and_runs_instead_of_failing(folder_source, member_client, query):
    assert member_client.get(f"/api/v1/sources/?{query}").status_code == 200
    assert member_client.get(f"/api/v1/sources/{folder_source.pk}/runs/?{query}").status_code == 200


def test_the_runs_list_gives_at_most_a_hundred_runs_a_page(folder_source, tenant, member_client):
    SyncRun.objects.bulk_create(
        SyncRun(tenant=tenant, source=folder_source, status=SyncRun.Status.DONE) for _ in range(101)
    )
    url = f"/api/v1/sources/{folder_source.pk}/runs/"
    assert len(member_client.get(url).json()["results"]) == 20
    assert len(member_client.get(f"{url}?limit=500").json()["results"]) == 100


def test_a_sync_asked_while_one_is_going_on_returns_that_run(
    folder_source, tenant, admin_client, django_capture_on_commit_callbacks
):
    running = SyncRun.objects.create(tenant=tenant, source=folder_source, status=SyncRun.Status.RUNNING)
    response = sync(admin_client, folder_source.pk, django_capture_on_commit_callbacks)
    assert response.status_code == 202
    assert (response.json()["id"], response.json()["status"]) == (running.pk, "running")
    assert response["Location"] == f"/api/v1/sources/{folder_source.pk}/runs/{running.pk}/"
    assert SyncRun.objects.filter(source=folder_source).count() == 1
