"""Retrieval-settings changes in the audit log: proposed and applied through the API, the quality
gate's verdict (by the gate), and an admin's override of a refused change."""

from __future__ import annotations

import pytest

from core.audit import SYSTEM_QUALITY_GATE
from core.models import AuditEvent, Membership
from knowledge.services import documents_ingest
from quality.models import ConfigChange
from quality.services import judgment_list_import
from tests.api.conftest import client_for
from tests.factories import MembershipFactory, SourceFactory
from tests.quality.test_gate import JUDGMENTS, KITTENS, PASTA, PRINTER, WORSE

URL = "/api/v1/settings/retrieval/"


def recorded() -> list[tuple]:
    return [
        (e.action, e.actor_label, e.changes)
        for e in AuditEvent.objects.filter(action__startswith="retrieval_settings.").order_by("id")
    ]


@pytest.fixture
def admin_user(tenant):
    return MembershipFactory(tenant=tenant, role=Membership.Role.ADMIN).user


@pytest.fixture
def judged(tenant):
    """The tenant with a tiny corpus and one judgment list on it: changes go through the gate."""
    documents_ingest(tenant=tenant, source=SourceFactory(tenant=tenant), documents=[KITTENS, PRINTER, PASTA])
    judgment_list_import(tenant=tenant, name="pets-and-pasta", origin="manual", judgments=JUDGMENTS)
    return tenant


def test_a_change_applied_at_once_is_recorded_by_the_admin(tenant, admin_user):
    response = client_for(admin_user).post(URL, {"config": {"fusion": "rrf"}}, format="json")
    assert response.status_code == 202

    assert recorded() == [
        (
            "retrieval_settings.changed",
            admin_user.username,
            {"settings": {"fusion": [None, "rrf"]}, "status": "applied"},
        )
    ]
    event = AuditEvent.objects.get(action="retrieval_settings.changed")
    assert (event.tenant_id, event.object_type, event.object_id) == (
        tenant.pk,
        "configchange",
        str(response.json()["id"]),
    )


def test_a_gated_change_is_recorded_when_proposed_and_when_the_gate_accepts_it(
    judged, admin_user, django_capture_on_commit_callbacks
):
    with django_capture_on_commit_callbacks(execute=True):
        response = client_for(admin_user).post(URL, {"config": {"ef_search": 200}}, format="json")
    assert response.status_code == 202

    settings = {"ef_search": [None, 200]}
    assert recorded() == [
        ("retrieval_settings.proposed", admin_user.username, {"settings": settings, "status": "pending"}),
        ("retrieval_settings.changed", SYSTEM_QUALITY_GATE, {"settings": settings, "status": "accepted"}),
    ]


def test_a_refused_change_and_its_override_are_recorded(judged, admin_user, django_capture_on_commit_callbacks):
    client = client_for(admin_user)
    with django_capture_on_commit_callbacks(execute=True):
        change_id = client.post(URL, {"config": WORSE}, format="json").json()["id"]
    assert ConfigChange.objects.get(pk=change_id).status == ConfigChange.Status.REFUSED

    response = client.post(f"{URL}changes/{change_id}/override/")
    assert response.status_code == 200

    settings = {"mode": [None, "lexical"]}
    assert recorded() == [
        ("retrieval_settings.proposed", admin_user.username, {"settings": settings, "status": "pending"}),
        ("retrieval_settings.refused", SYSTEM_QUALITY_GATE, {"settings": settings, "status": "refused"}),
        ("retrieval_settings.overridden", admin_user.username, {"settings": settings, "status": "overridden"}),
    ]


def test_a_refused_proposal_by_a_member_records_nothing(tenant):
    member = MembershipFactory(tenant=tenant).user
    assert client_for(member).post(URL, {"config": {"fusion": "rrf"}}, format="json").status_code == 403
    assert recorded() == []
