"""Service sources in the admin: the write-only token, "Test connection", and the last content and
permission syncs on a source's page. The service is the scripted one (``tests.connectors.scripted``)."""

import json

import pytest
from django.contrib.messages import get_messages
from django.db import connection
from django.urls import reverse

from core.models import AuditEvent
from knowledge.models import Source, SyncRun
from knowledge.services.sources import source_create
from tests.connectors.scripted import scripted_service
from tests.factories import SourceFactory, UserFactory

TOKEN = "xoxb-admin-token-4711"
NEW_TOKEN = "xoxb-admin-token-0815"
LOCATION = "http://127.0.0.1:9/"
ADD = reverse("admin:knowledge_source_add")
CHANGELIST = reverse("admin:knowledge_source_changelist")


def change_page(source) -> str:
    return reverse("admin:knowledge_source_change", args=[source.pk])


def slack_form(tenant, **fields) -> dict:
    """A service source's form as the admin posts it (the add page holds every kind's fields)."""
    return {
        "tenant": tenant.pk,
        "name": "team-slack",
        "kind": "slack",
        "reliability": "1.0",
        "half_life_days": "",
        "versions_kept": "",
        "location": LOCATION,
        "sync_every": "",
        "secret": "",
        "options": '{"channels": ["general"]}',
        "perm_every": "",
        **fields,
    }


def messages_of(response) -> list[str]:
    return [str(m) for m in get_messages(response.wsgi_request)]


def stored_secret(source) -> str:
    with connection.cursor() as cursor:
        cursor.execute("SELECT secret FROM knowledge_source WHERE id = %s", [source.pk])
        return cursor.fetchone()[0]


@pytest.fixture
def service(monkeypatch, settings):
    settings.KB_FETCH_ALLOWED_NETWORKS = ["127.0.0.1/32"]
    return scripted_service(monkeypatch)


@pytest.fixture
def superuser(client, db):
    user = UserFactory(is_staff=True, is_superuser=True)
    client.force_login(user)
    return user


@pytest.fixture
def slack(tenant, service) -> Source:
    return source_create(tenant=tenant, name="team-slack", kind="slack", location=LOCATION, secret=TOKEN)


def test_a_slack_source_added_in_the_admin_keeps_its_token_encrypted_and_its_page_never_shows_it(
    client, tenant, superuser, service
):
    response = client.post(ADD, slack_form(tenant, secret=TOKEN, perm_every="30m"))

    assert response.status_code == 302, response.context["adminform"].form.errors
    source = Source.objects.get(name="team-slack")
    assert (source.secret, source.options) == (TOKEN, {"channels": ["general"]})
    assert source.perm_every.total_seconds() == 1800
    assert stored_secret(source).startswith("fernet:") and TOKEN not in stored_secret(source)
    page = client.get(change_page(source)).content.decode()
    assert TOKEN not in page
    assert 'type="password" name="secret"' in page and "A token is stored: leave empty to keep it" in page
    created = AuditEvent.objects.for_tenant(tenant).get(action="source.created")
    assert created.changes["secret"] == "set"


def test_a_slack_source_added_without_a_token_is_refused_on_the_secret_field(client, tenant, superuser, service):
    response = client.post(ADD, slack_form(tenant))

    assert response.status_code == 200
    assert "needs its token or key" in str(response.context["adminform"].form.errors["secret"])
    assert not Source.objects.filter(name="team-slack").exists()


def test_leaving_the_secret_empty_keeps_the_stored_token_and_typing_one_replaces_it(client, tenant, superuser, slack):
    kept = client.post(change_page(slack), slack_form(tenant, options='{"channels": ["random"]}'))
    slack.refresh_from_db()
    token_after_empty, options_after_empty = slack.secret, slack.options

    replaced = client.post(change_page(slack), slack_form(tenant, secret=NEW_TOKEN, options='{"channels": ["random"]}'))
    slack.refresh_from_db()

    assert kept.status_code == 302 and replaced.status_code == 302
    assert (token_after_empty, options_after_empty) == (TOKEN, {"channels": ["random"]})
    assert slack.secret == NEW_TOKEN
    assert NEW_TOKEN not in client.get(change_page(slack)).content.decode()
    changes = [e.changes for e in AuditEvent.objects.for_tenant(tenant).filter(action="source.changed").order_by("pk")]
    assert changes == [{"options": [{}, {"channels": ["random"]}]}, {"secret": "changed"}]
    logged = json.dumps([e.changes for e in AuditEvent.objects.all()])
    assert TOKEN not in logged and NEW_TOKEN not in logged


def test_the_test_connection_button_says_what_the_token_sees_and_the_action_why_it_was_refused(
    client, tenant, superuser, slack, service
):
    service.put("general/1", "Lunch", "Pasta on Friday.")
    page = client.get(change_page(slack)).content.decode()

    tested = client.post(change_page(slack), slack_form(tenant, _test_connection="Test connection"))
    service.revoked = True
    refused = client.post(CHANGELIST, {"action": "test_connection", "_selected_action": [slack.pk]})

    assert 'name="_test_connection"' in page
    assert tested.status_code == 302 and tested.url == change_page(slack)
    assert "team-slack: 1 documents" in messages_of(tested)
    assert "team-slack: The scripted service refused the token (revoked). Nothing was changed." in messages_of(refused)


def test_a_folder_sources_page_has_neither_a_token_field_nor_a_test_button(client, tenant, superuser):
    source = SourceFactory(tenant=tenant, name="uploads", kind="files")

    page = client.get(change_page(source)).content.decode()

    assert 'name="secret"' not in page and 'name="_test_connection"' not in page


def test_a_service_sources_page_shows_its_last_content_and_permission_syncs_with_their_errors(
    client, tenant, superuser, slack
):
    SyncRun.objects.create(
        tenant=tenant,
        source=slack,
        scope="content",
        status="done",
        new=4,
        failed=1,
        errors=[{"document": "general/7", "error": "The file is empty."}],
    )
    SyncRun.objects.create(
        tenant=tenant,
        source=slack,
        scope="permissions",
        status="done",
        permissions={
            "groups": 2,
            "public": 5,
            "restricted": 6,
            "unreadable": 3,
            "rules_added": 4,
            "rules_removed": 1,
            "source_users_not_members": 2,
        },
    )
    SyncRun.objects.create(tenant=tenant, source=slack, scope="permissions", status="failed", error="Slack is down.")

    page = client.get(change_page(slack)).content.decode()

    content, permissions = page.split("Last content sync", 1)[1].split("Last permission sync", 1)
    assert "4 new" in content and "1 failed" in content and "general/7: The file is empty." in content
    assert "Failed: Slack is down." in permissions  # the newest permission sync
    SyncRun.objects.filter(status="failed").delete()
    page = client.get(change_page(slack)).content.decode()
    assert "2 groups; 5 documents for the whole tenant, 6 restricted, 3 admins only (permissions unreadable)" in page
