"""GET /api/v1/audit/: a tenant's owners and admins read its audit log, filtered and paginated;
another tenant's events never show, whichever token or X-Tenant header the caller sends."""

from __future__ import annotations

import pytest
from django.utils import timezone
from rest_framework.test import APIClient

from core.audit import audit_record
from core.memberships import membership_token_create
from core.models import Membership
from tests.api.conftest import client_for
from tests.factories import MembershipFactory, TenantFactory

URL = "/api/v1/audit/"


@pytest.fixture
def other(db):
    return TenantFactory(slug="other")


@pytest.fixture
def both_admin(tenant, other):
    """An admin of ``tenant`` and of ``other``."""
    user = MembershipFactory(tenant=tenant, role=Membership.Role.ADMIN).user
    MembershipFactory(tenant=other, user=user, role=Membership.Role.ADMIN)
    return user


@pytest.fixture
def logged(tenant, other, admin_member):
    """Events of both tenants and one of none (a failed sign-in of an unknown username)."""
    return {
        "ours": audit_record(
            action="source.created",
            tenant=tenant,
            actor=admin_member,
            object_type="source",
            object_id="7",
            object_repr="handbook",
            changes={"name": [None, "handbook"]},
        ),
        "theirs": audit_record(action="source.created", tenant=other, object_type="source", object_repr="secret"),
        "nobody": audit_record(action="signin.failed", object_type="user", object_repr="mallory"),
    }


def reprs(response) -> list[str]:
    assert response.status_code == 200, response.content
    return [event["object_repr"] for event in response.json()["results"]]


def test_an_admin_reads_their_tenants_events_with_actor_address_object_and_changes(admin_client, admin_member, logged):
    response = admin_client.get(URL, {"action": "source.created"}, REMOTE_ADDR="192.0.2.10")
    assert response.status_code == 200
    [event] = response.json()["results"]
    assert event == {
        "id": logged["ours"].pk,
        "created_at": event["created_at"],
        "actor": admin_member.username,
        "action": "source.created",
        "object_type": "source",
        "object_id": "7",
        "object_repr": "handbook",
        "changes": {"name": [None, "handbook"]},
        "client_ip": None,  # recorded outside a request
    }


def test_an_action_taken_through_the_api_shows_who_and_from_where(admin_client, admin_member, tenant):
    settings_change = admin_client.post(
        "/api/v1/settings/retrieval/", {"config": {"fusion": "rrf"}}, format="json", REMOTE_ADDR="192.0.2.44"
    )
    assert settings_change.status_code == 202
    [event] = admin_client.get(URL, {"action": "retrieval_settings."}).json()["results"]
    assert (event["actor"], event["client_ip"], event["action"]) == (
        admin_member.username,
        "192.0.2.44",
        "retrieval_settings.changed",
    )


def test_events_come_newest_first_and_paginated(admin_client, tenant):
    for n in range(5):
        audit_record(action="source.changed", tenant=tenant, object_repr=f"s{n}")
    page = admin_client.get(URL, {"action": "source.changed", "limit": 2}).json()
    assert page["count"] == 5
    assert [e["object_repr"] for e in page["results"]] == ["s4", "s3"]
    assert page["next"]
    rest = admin_client.get(URL, {"action": "source.changed", "limit": 2, "offset": 4}).json()
    assert [e["object_repr"] for e in rest["results"]] == ["s0"]


def test_another_tenants_events_and_those_of_no_tenant_never_show(admin_client, logged):
    shown = reprs(admin_client.get(URL, {"limit": 200}))
    assert "handbook" in shown
    assert "secret" not in shown
    assert "mallory" not in shown


def test_a_membership_token_reads_only_its_own_tenants_log(both_admin, tenant, other, logged):
    _, key = membership_token_create(membership=Membership.objects.get(user=both_admin, tenant=other))
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {key}")

    shown = reprs(client.get(URL, {"action": "source.created"}))
    assert shown == ["secret"]

    refused = client.get(URL, HTTP_X_TENANT=tenant.slug)
    assert refused.status_code == 403
    assert "handbook" not in refused.content.decode()


def test_x_tenant_chooses_which_of_the_callers_tenants_log_is_read(both_admin, tenant, other, logged):
    client = client_for(both_admin)
    assert reprs(client.get(URL, {"action": "source.created"}, HTTP_X_TENANT="other")) == ["secret"]
    assert reprs(client.get(URL, {"action": "source.created"}, HTTP_X_TENANT=tenant.slug)) == ["handbook"]
    assert client.get(URL).status_code == 400  # several tenants, none named
    assert client.get(URL, HTTP_X_TENANT="nowhere").status_code == 403


@pytest.mark.parametrize("role", ["editor", "member", "viewer"])
def test_only_owners_and_admins_may_read_the_log(tenant, logged, role):
    response = client_for(MembershipFactory(tenant=tenant, role=role).user).get(URL)
    assert response.status_code == 403
    assert response.json()["error"] == {
        "code": "permission_denied",
        "message": "Only the tenant's owners and admins may read its audit log.",
    }
    owner = MembershipFactory(tenant=tenant, role=Membership.Role.OWNER).user
    assert client_for(owner).get(URL).status_code == 200


@pytest.mark.django_db
def test_an_unauthenticated_caller_gets_401():
    assert APIClient().get(URL).status_code == 401


def test_filters_by_actor_action_prefix_and_object(admin_client, admin_member, tenant, logged):
    audit_record(action="source.deleted", tenant=tenant, object_type="source", object_id="8", object_repr="wiki")
    audit_record(action="token.revoked", tenant=tenant, object_type="membershiptoken", object_id="7", object_repr="kbm")

    assert reprs(admin_client.get(URL, {"actor": admin_member.username, "action": "source."})) == ["handbook"]
    assert reprs(admin_client.get(URL, {"action": "source."})) == ["wiki", "handbook"]
    assert reprs(admin_client.get(URL, {"action": "source"})) == []  # exact unless it ends with "."
    assert reprs(admin_client.get(URL, {"object_type": "source", "object_id": "8"})) == ["wiki"]
    assert reprs(admin_client.get(URL, {"object_id": "7"})) == ["kbm", "handbook"]
    assert reprs(admin_client.get(URL, {"actor": "system", "action": "token.revoked"})) == ["kbm"]


def test_filters_by_time(admin_client, tenant):
    audit_record(action="source.changed", tenant=tenant, object_repr="before")
    middle = timezone.now()
    audit_record(action="source.changed", tenant=tenant, object_repr="after")

    assert reprs(admin_client.get(URL, {"action": "source.changed", "since": middle.isoformat()})) == ["after"]
    assert reprs(admin_client.get(URL, {"action": "source.changed", "until": middle.isoformat()})) == ["before"]


@pytest.mark.parametrize(
    ("params", "field"),
    [
        ({"since": "yesterday"}, "since"),
        ({"until": "2025-13-40T00:00"}, "until"),
        ({"object_id": "x" * 65}, "object_id"),
    ],
)
def test_a_malformed_filter_is_a_400_naming_it(admin_client, params, field):
    response = admin_client.get(URL, params)
    assert response.status_code == 400
    assert response.json()["error"]["code"] == "invalid_input"
    assert field in response.json()["error"]["message"]


def test_since_after_until_is_a_400(admin_client):
    response = admin_client.get(URL, {"since": "2025-06-02T00:00:00Z", "until": "2025-06-01T00:00:00Z"})
    assert response.status_code == 400
    assert response.json()["error"]["message"] == "'since' must be before 'until'."


def test_the_openapi_schema_documents_the_endpoint_and_its_filters(member_client):
    schema = member_client.get("/api/schema/?format=json").json()
    operation = schema["paths"]["/api/v1/audit/"]["get"]
    assert operation["operationId"] == "audit_list"
    assert {p["name"] for p in operation["parameters"]} >= {
        "actor",
        "action",
        "object_type",
        "object_id",
        "since",
        "until",
        "limit",
        "offset",
    }
