"""The knowledge app's audited actions, each done the way a user does it, found in the audit log:
access groups and rules (admin, services), document deletes (API, admin) and source syncs (API,
CLI, Celery beat's schedule)."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.contrib.auth.models import Permission
from django.core.management import call_command
from django.urls import reverse

from core.audit import OPERATOR_CLI, SYSTEM_SCHEDULE
from core.models import AuditEvent
from knowledge.access import access_group_save, access_rule_grant, access_rule_revoke
from knowledge.models import AccessGroup, AccessRule, Document, Source
from knowledge.services.sync import sources_sync_due
from tests.api.conftest import client_for
from tests.factories import MembershipFactory, SourceFactory, folder_granted

pytestmark = pytest.mark.django_db


def recorded(prefix: str) -> list[AuditEvent]:
    return list(AuditEvent.objects.filter(action__startswith=prefix).order_by("id"))


@pytest.fixture
def tenant_admin(client, admin_member):
    """A staff admin of ``tenant`` (not a superuser) holding the core and knowledge permissions."""
    admin_member.user_permissions.set(Permission.objects.filter(content_type__app_label__in=["core", "knowledge"]))
    client.force_login(admin_member)
    return admin_member


@pytest.fixture
def api_admin(admin_member):
    """An API client of ``tenant``'s admin (token authentication)."""
    return client_for(admin_member)


@pytest.fixture
def notes(tmp_path, tenant):
    """A folder with one short note, granted to ``tenant``."""
    folder = tmp_path / "notes"
    folder.mkdir()
    (folder / "tea.md").write_text("# Green tea\n\nSteep green tea for two minutes in water just below boiling.\n")
    return folder_granted(tenant, folder)


@pytest.fixture
def notes_source(tenant, notes) -> Source:
    return Source.objects.create(tenant=tenant, name="notes", kind=Source.Kind.FOLDER, location=str(notes))


# ---- access groups and rules -------------------------------------------------------------------


def test_an_access_group_added_changed_and_deleted_in_the_admin_is_recorded(client, tenant, tenant_admin):
    ann = MembershipFactory(tenant=tenant).user
    bob = MembershipFactory(tenant=tenant).user
    add = client.post(
        reverse("admin:knowledge_accessgroup_add"), {"tenant": tenant.pk, "name": "hr", "members": [ann.pk]}
    )
    assert add.status_code == 302
    group = AccessGroup.objects.get(name="hr")
    change = reverse("admin:knowledge_accessgroup_change", args=[group.pk])
    client.post(change, {"tenant": tenant.pk, "name": "people", "members": [ann.pk, bob.pk]})
    client.post(reverse("admin:knowledge_accessgroup_delete", args=[group.pk]), {"post": "yes"})
    assert not AccessGroup.objects.exists()

    events = recorded("access_group.")
    assert [(e.action, e.changes) for e in events] == [
        (
            "access_group.created",
            {"tenant": [None, tenant.slug], "name": [None, "hr"], "members": [None, [ann.username]]},
        ),
        (
            "access_group.changed",
            {"name": ["hr", "people"], "members": [[ann.username], sorted([ann.username, bob.username])]},
        ),
        (
            "access_group.deleted",
            {"name": ["people", None], "members": [sorted([ann.username, bob.username]), None], "rules": 0},
        ),
    ]
    assert {(e.tenant_id, e.actor_label, e.object_id) for e in events} == {
        (tenant.pk, tenant_admin.username, str(group.pk))
    }


def test_an_access_rule_added_and_deleted_in_the_admin_is_recorded(client, tenant, source, tenant_admin):
    group = access_group_save(tenant=tenant, name="hr")
    add = client.post(
        reverse("admin:knowledge_accessrule_add"), {"tenant": tenant.pk, "source": source.pk, "group": group.pk}
    )
    assert add.status_code == 302
    rule = AccessRule.objects.get()
    client.post(reverse("admin:knowledge_accessrule_delete", args=[rule.pk]), {"post": "yes"})
    assert not AccessRule.objects.exists()

    events = recorded("access_rule.")
    assert [(e.action, e.changes) for e in events] == [
        (
            "access_rule.created",
            {"tenant": [None, tenant.slug], "source": [None, str(source)], "group": [None, str(group)]},
        ),
        ("access_rule.deleted", {"source": [str(source), None], "group": [str(group), None]}),
    ]
    assert {(e.tenant_id, e.actor_label) for e in events} == {(tenant.pk, tenant_admin.username)}


def test_the_access_services_record_groups_and_rules(tenant, source, member):
    group = access_group_save(tenant=tenant, name="hr", members=[member])
    access_group_save(tenant=tenant, name="hr", members=[member], group=group)  # unchanged: no event
    access_group_save(tenant=tenant, name="hr", members=[], group=group)
    rule = access_rule_grant(tenant=tenant, source=source, user=member)
    access_rule_grant(tenant=tenant, source=source, user=member)  # exists already: no event
    access_rule_revoke(tenant=tenant, rule_id=rule.pk)

    assert [(e.action, e.changes) for e in recorded("access_")] == [
        ("access_group.created", {"name": [None, "hr"], "members": [[], [member.username]]}),
        ("access_group.changed", {"members": [[member.username], []]}),
        ("access_rule.created", {"source": [None, str(source)], "user": [None, member.username]}),
        ("access_rule.deleted", {"source": [str(source), None], "user": [member.username, None]}),
    ]


# ---- document deletes --------------------------------------------------------------------------


def test_a_document_deleted_through_the_api_is_recorded_with_who_and_from_where(corpus, api_admin, admin_member):
    pasta = Document.objects.for_tenant(corpus).get(external_id="recipes/pasta")
    response = api_admin.delete(f"/api/v1/documents/{pasta.pk}/", REMOTE_ADDR="192.0.2.7")
    assert response.status_code == 204

    [deleted] = recorded("document.")
    assert (deleted.action, deleted.tenant_id, deleted.actor_label, deleted.client_ip) == (
        "document.deleted",
        corpus.pk,
        admin_member.username,
        "192.0.2.7",
    )
    assert (deleted.object_type, deleted.object_id, deleted.object_repr) == ("document", str(pasta.pk), "Cooking pasta")
    assert deleted.changes == {"external_id": "recipes/pasta", "title": "Cooking pasta", "source": pasta.source_id}


def test_a_document_deleted_in_the_admin_is_recorded_once(client, corpus, tenant_admin):
    pasta = Document.objects.for_tenant(corpus).get(external_id="recipes/pasta")
    client.post(reverse("admin:knowledge_document_delete", args=[pasta.pk]), {"post": "yes"})
    assert not Document.objects.filter(pk=pasta.pk).exists()
    assert [(e.action, e.object_id, e.actor_label) for e in recorded("document.")] == [
        ("document.deleted", str(pasta.pk), tenant_admin.username)
    ]


# ---- source syncs ------------------------------------------------------------------------------


def test_a_sync_asked_for_through_the_api_is_recorded(tenant, notes_source, api_admin, admin_member):
    response = api_admin.post(f"/api/v1/sources/{notes_source.pk}/sync/", REMOTE_ADDR="192.0.2.8")
    assert response.status_code == 202

    [synced] = recorded("source.synced")
    assert (synced.tenant_id, synced.actor_label, synced.client_ip) == (tenant.pk, admin_member.username, "192.0.2.8")
    assert (synced.object_type, synced.object_id) == ("source", str(notes_source.pk))
    assert synced.changes == {"run": response.json()["id"], "trigger": "manual", "scope": "all"}


def test_a_sync_run_from_the_command_line_is_recorded_by_the_operator(tenant, notes_source):
    call_command("source", "sync", "--tenant", tenant.slug, "--name", "notes")
    [synced] = recorded("source.synced")
    assert (synced.tenant_id, synced.actor_id, synced.actor_label) == (tenant.pk, None, OPERATOR_CLI)
    assert synced.changes["trigger"] == "manual"


def test_a_scheduled_sync_is_recorded_by_the_schedule(tenant, notes_source):
    notes_source.sync_every = timedelta(hours=1)
    notes_source.save(update_fields=["sync_every"])
    [run_id] = sources_sync_due()

    [synced] = recorded("source.synced")
    assert (synced.tenant_id, synced.actor_id, synced.actor_label) == (tenant.pk, None, SYSTEM_SCHEDULE)
    assert synced.changes == {"run": run_id, "trigger": "schedule", "scope": "all"}


def test_a_sync_of_another_tenants_source_is_neither_run_nor_recorded(other_tenant_corpus, api_admin):
    other_source = SourceFactory(tenant=other_tenant_corpus, kind=Source.Kind.FOLDER, location="/srv/x")
    assert api_admin.post(f"/api/v1/sources/{other_source.pk}/sync/").status_code == 404
    assert not recorded("source.synced")
