"""A tenant admin pointing a service source at the server's own network: the tenant boundary of
the service connectors. Only the operator (``KB_FETCH_ALLOWED_NETWORKS``) opens intranet ranges;
a tenant's source aimed at loopback or the cloud metadata address is refused when it is saved,
and a location changed behind the service's back is refused at the socket, before any request
reaches the address."""

from __future__ import annotations

import pytest

from core.outbound import AddressNotAllowed
from knowledge.models import Document, Source
from knowledge.services.sources import source_create
from knowledge.services.sync import source_sync
from tests.connectors.standins.slack import SlackStandIn
from tests.factories import TenantFactory

pytestmark = pytest.mark.django_db


@pytest.fixture
def slack():
    with SlackStandIn() as standin:
        standin.add_user("U1", "Alice Archer", "alice@example.com")
        standin.add_channel("C1", "general", members=["U1"])
        standin.post("C1", "U1", "The server's own secrets would be here.")
        yield standin


@pytest.mark.parametrize(
    "location",
    ["http://127.0.0.1:9/", "http://localhost/api/", "http://169.254.169.254/latest/", "http://[::1]/"],
)
def test_a_tenant_admin_cannot_point_a_service_source_at_the_servers_network(settings, location):
    settings.KB_FETCH_ALLOWED_NETWORKS = []
    with pytest.raises(AddressNotAllowed):
        source_create(tenant=TenantFactory(), name="chat", kind="slack", location=location, secret="xoxb-token")
    assert not Source.objects.filter(name="chat").exists()


def test_a_location_changed_to_loopback_behind_the_services_back_never_gets_a_request(settings, slack):
    settings.KB_FETCH_ALLOWED_NETWORKS = []
    settings.KB_CONNECTOR_BACKOFF_S = 0
    tenant = TenantFactory()
    source = source_create(
        tenant=tenant, name="chat", kind="slack", location="https://slack.com/api/", secret=slack.token
    )
    Source.objects.filter(pk=source.pk).update(location=slack.url)  # as if written straight to the database
    source.refresh_from_db()

    run = source_sync(source=source)

    assert run.status == "failed"
    assert "not allowed" in run.error
    assert slack.requests == []
    assert not Document.objects.filter(tenant=tenant).exists()


def test_the_operator_opens_loopback_and_the_same_source_syncs(settings, slack):
    settings.KB_FETCH_ALLOWED_NETWORKS = ["127.0.0.1/32"]
    settings.KB_CONNECTOR_BACKOFF_S = 0
    tenant = TenantFactory()
    source = source_create(tenant=tenant, name="chat", kind="slack", location=slack.url, secret=slack.token)

    run = source_sync(source=source)

    assert run.status == "done", run.error
    assert Document.objects.filter(tenant=tenant, deleted_at__isnull=True).count() == 1
