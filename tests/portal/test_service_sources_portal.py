"""Service sources on the portal's Sources page: admins see the last content and permission syncs
and test the connection; members see neither the permission sync nor the button, and nobody the
token. The service is the scripted one (``tests.connectors.scripted``)."""

import re

import pytest
from django.test import Client
from django.urls import reverse

from knowledge.models import SyncRun
from knowledge.services.sources import source_create
from tests.connectors.scripted import scripted_service

TOKEN = "xoxb-portal-token-4711"
SOURCES = reverse("portal:sources")
HX = {"HTTP_HX_REQUEST": "true"}


def rows(html: str) -> dict[str, str]:
    return dict(re.findall(r'<th scope="row">([^<]+)</th>(.*?)</tr>', html, flags=re.S))


def text(html: str) -> str:
    return re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", html))


@pytest.fixture
def service(monkeypatch, settings):
    settings.KB_FETCH_ALLOWED_NETWORKS = ["127.0.0.1/32"]
    return scripted_service(monkeypatch)


@pytest.fixture
def slack(tenant, service):
    """A slack source whose last content sync read two documents, and whose newer permission sync
    could not read the readers of three documents."""
    source = source_create(tenant=tenant, name="team-slack", kind="slack", location="http://127.0.0.1:9/", secret=TOKEN)
    SyncRun.objects.create(tenant=tenant, source=source, scope="content", status="done", new=2)
    SyncRun.objects.create(
        tenant=tenant,
        source=source,
        scope="permissions",
        status="done",
        permissions={"groups": 1, "public": 4, "restricted": 2, "unreadable": 3, "source_users_not_members": 0},
    )
    return source


def test_an_admin_sees_the_last_content_sync_the_last_permission_sync_and_a_test_button(client, admin_member, slack):
    client.force_login(admin_member)

    html = client.get(SOURCES).content.decode()

    row = rows(html)["team-slack"]
    assert "Slack" in text(row)
    assert "Done: 2 new" in text(row)  # the content sync, though the permission sync is newer
    assert "1 groups, 4 documents for the whole tenant, 2 restricted" in text(row)
    assert "3 documents admins only: permissions unreadable" in text(row)
    assert f'action="{reverse("portal:source-test", args=[slack.pk])}"' in row and "csrfmiddlewaretoken" in row
    assert TOKEN not in html


def test_a_member_sees_the_last_sync_but_neither_the_permission_sync_nor_the_test_button(
    client, member, slack, service
):
    client.force_login(member)

    html = client.get(SOURCES).content.decode()
    refused = client.post(reverse("portal:source-test", args=[slack.pk]))

    assert "Done: 2 new" in text(rows(html)["team-slack"])
    assert "Test connection" not in html and "permissions unreadable" not in html and TOKEN not in html
    assert refused.status_code == 403 and service.calls == []


def test_test_connection_shows_what_the_token_sees_then_why_the_service_refused_it(
    client, admin_member, slack, service
):
    service.put("general/1", "Lunch", "Pasta on Friday.")
    client.force_login(admin_member)
    url = reverse("portal:source-test", args=[slack.pk])

    accepted = client.post(url, **HX).content.decode()
    service.revoked = True
    refused = client.post(url, **HX).content.decode()
    plain = client.post(url, follow=True)

    assert "Connected: 1 documents" in text(accepted)
    assert "Failed: The scripted service refused the token (revoked)." in text(refused)
    assert plain.redirect_chain[-1][0] == SOURCES
    assert "team-slack: The scripted service refused the token (revoked)." in text(plain.content.decode())


def test_test_connection_is_a_post_with_the_csrf_token(admin_member, slack):
    browser = Client(enforce_csrf_checks=True)
    browser.force_login(admin_member)
    url = reverse("portal:source-test", args=[slack.pk])

    assert browser.get(url).status_code == 405
    assert browser.post(url).status_code == 403
