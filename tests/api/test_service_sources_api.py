"""Service sources through the API: the secret is write-only, "test connection" answers what the
token sees (or why the service refused it), and a sync says what it synced and the permissions'
counts. The service is the scripted one (``tests.connectors.scripted``): no HTTP."""

import json

import pytest

from core.models import AuditEvent
from knowledge.models import Source
from tests.connectors.scripted import scripted_service
from tests.factories import SourceFactory, folder_granted

TOKEN = "xoxb-first-token-4711"
NEW_TOKEN = "xoxb-second-token-0815"
LOCATION = "http://127.0.0.1:9/"


@pytest.fixture
def service(monkeypatch, settings):
    """Every slack source reads a scripted service; the stand-in address is allowed."""
    settings.KB_FETCH_ALLOWED_NETWORKS = ["127.0.0.1/32"]
    return scripted_service(monkeypatch)


def create_slack(client, **fields):
    body = {"name": "team-slack", "kind": "slack", "location": LOCATION, "secret": TOKEN, **fields}
    return client.post("/api/v1/sources/", body, format="json")


@pytest.fixture
def slack(service, admin_client) -> dict:
    response = create_slack(admin_client)
    assert response.status_code == 201, response.json()
    return response.json()


def test_a_slack_source_created_with_a_token_never_shows_it_again_anywhere(tenant, service, admin_client):
    created = create_slack(admin_client, options={"channels": ["general"]}, sync_every="1h", perm_every="30m")
    assert created.status_code == 201, created.json()
    source_id = created.json()["id"]
    detail = admin_client.get(f"/api/v1/sources/{source_id}/")
    listed = admin_client.get("/api/v1/sources/")
    changed = admin_client.patch(f"/api/v1/sources/{source_id}/", {"options": {"channels": ["random"]}}, format="json")

    for response in (created, detail, listed, changed):
        assert TOKEN not in response.content.decode()
    body = changed.json()
    assert "secret" not in body and body["has_secret"] is True
    assert body["options"] == {"channels": ["random"]}
    assert (body["kind"], body["location"], body["sync_every"], body["perm_every"]) == ("slack", LOCATION, 3600, 1800)
    assert body["last_perm_synced_at"] is None
    assert Source.objects.get(pk=source_id).secret == TOKEN  # a PATCH without secret keeps it


def test_a_new_token_replaces_the_old_one_and_the_audit_log_records_only_that_it_changed(tenant, slack, admin_client):
    response = admin_client.patch(f"/api/v1/sources/{slack['id']}/", {"secret": NEW_TOKEN}, format="json")

    assert response.status_code == 200 and NEW_TOKEN not in response.content.decode()
    assert Source.objects.get(pk=slack["id"]).secret == NEW_TOKEN
    events = {e.action: e for e in AuditEvent.objects.for_tenant(tenant).filter(object_type="source")}
    assert events["source.created"].changes["secret"] == "set"
    assert events["source.changed"].changes == {"secret": "changed"}
    logged = json.dumps([[e.changes, e.object_repr] for e in AuditEvent.objects.all()])
    assert TOKEN not in logged and NEW_TOKEN not in logged


def test_a_slack_source_without_a_token_or_with_options_that_are_not_an_object_is_refused(service, admin_client):
    no_token = admin_client.post(
        "/api/v1/sources/", {"name": "s", "kind": "slack", "location": LOCATION}, format="json"
    ).json()
    bad_options = create_slack(admin_client, options=["general"]).json()
    bad_schedule = create_slack(admin_client, perm_every="soon").json()

    assert no_token["error"]["code"] == "secret_required"
    assert bad_options["error"]["code"] == "invalid_options"
    assert bad_schedule["error"]["code"] == "invalid_perm_every" and "perm_every" in bad_schedule["error"]["message"]
    assert not Source.objects.filter(kind="slack").exists()


def test_a_member_may_neither_create_nor_test_a_service_source_and_sees_no_token(slack, member_client):
    assert create_slack(member_client, name="mine").status_code == 403
    assert member_client.post(f"/api/v1/sources/{slack['id']}/test/").status_code == 403

    seen = member_client.get(f"/api/v1/sources/{slack['id']}/")
    assert seen.json()["has_secret"] is True and TOKEN not in seen.content.decode()


def test_test_connection_says_what_the_token_sees_then_why_the_service_refused_it(slack, service, admin_client):
    service.put("general/1", "Lunch", "Pasta on Friday.")
    service.put("general/2", "Parking", "Level two is closed.")
    url = f"/api/v1/sources/{slack['id']}/test/"

    accepted = admin_client.post(url)
    service.revoked = True
    refused = admin_client.post(url)

    assert accepted.status_code == 200 and accepted.json() == {"ok": True, "message": "2 documents"}
    assert refused.status_code == 200
    assert refused.json() == {
        "ok": False,
        "code": "credential_rejected",
        "message": "The scripted service refused the token (revoked). Nothing was changed.",
    }


def test_testing_a_folder_source_is_a_400_since_it_has_no_service(tenant, admin_client):
    folder = SourceFactory(tenant=tenant, kind=Source.Kind.FILES)

    response = admin_client.post(f"/api/v1/sources/{folder.pk}/test/")

    assert response.status_code == 400 and response.json()["error"]["code"] == "not_a_service"


def test_another_tenants_service_source_is_a_404_to_test(service, slack, other_admin_client):
    assert other_admin_client.post(f"/api/v1/sources/{slack['id']}/test/").status_code == 404


def test_a_sync_reports_its_scope_and_a_document_whose_readers_could_not_be_read(
    slack, service, admin_client, django_capture_on_commit_callbacks
):
    service.put("general/1", "Lunch", "Pasta on Friday.")
    service.put("hidden/1", "Plans", "The plan for the launch.")
    service.permissions_unreadable = {"hidden/1"}
    url = f"/api/v1/sources/{slack['id']}/sync/"

    with django_capture_on_commit_callbacks(execute=True):
        synced = admin_client.post(url, {"scope": "all"}, format="json")
    with django_capture_on_commit_callbacks(execute=True):
        permissions = admin_client.post(url, {"scope": "permissions"}, format="json")
    wrong = admin_client.post(url, {"scope": "everything"}, format="json")

    assert synced.status_code == 202, synced.json()
    run = admin_client.get(synced["Location"]).json()
    assert (run["scope"], run["status"], run["new"]) == ("all", "done", 2), run
    assert run["permissions"]["unreadable"] == 1
    assert permissions.json()["scope"] == "permissions"
    again = admin_client.get(permissions["Location"]).json()
    assert (again["status"], again["new"], again["permissions"]["unreadable"]) == ("done", 0, 1), again
    assert admin_client.get(f"/api/v1/sources/{slack['id']}/").json()["last_perm_synced_at"] is not None
    assert wrong.status_code == 400 and "scope is one of all, content, permissions" in str(wrong.json())


def test_a_folder_source_asked_for_its_permissions_only_syncs_everything(
    tenant, tmp_path, admin_client, django_capture_on_commit_callbacks
):
    folder = folder_granted(tenant, tmp_path / "notes")
    (folder / "tea.md").write_text("# Tea\n\nSteep green tea for two minutes.\n")
    source = SourceFactory(tenant=tenant, kind=Source.Kind.FOLDER, location=str(folder))

    with django_capture_on_commit_callbacks(execute=True):
        response = admin_client.post(f"/api/v1/sources/{source.pk}/sync/", {"scope": "permissions"}, format="json")

    assert response.status_code == 202 and response.json()["scope"] == "all"
    assert admin_client.get(response["Location"]).json()["new"] == 1


def test_the_openapi_schema_has_the_secret_as_write_only_and_the_test_endpoint(member_client):
    schema = member_client.get("/api/schema/?format=json").json()
    components = schema["components"]["schemas"]

    assert components["SourceInput"]["properties"]["secret"]["writeOnly"] is True
    assert "secret" not in components["Source"]["properties"]
    assert {"has_secret", "options", "perm_every", "last_perm_synced_at"} <= set(components["Source"]["properties"])
    assert {"scope", "permissions"} <= set(components["SyncRun"]["properties"])
    assert "slack" in components["SourceInput"]["properties"]["kind"]["description"]
    test = schema["paths"]["/api/v1/sources/{source_id}/test/"]["post"]
    assert test["responses"]["200"]["content"]["application/json"]["schema"]["$ref"].endswith("SourceTestResult")
    sync = schema["paths"]["/api/v1/sources/{source_id}/sync/"]["post"]
    assert sync["requestBody"]["content"]["application/json"]["schema"]["$ref"].endswith("SyncRequest")
