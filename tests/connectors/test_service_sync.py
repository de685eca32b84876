"""The service sync and permissions that follow the source, with a scripted connector (the real
connectors run the same paths against their stand-ins in their own tests)."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import connection
from django.utils import timezone

from core.models import AuditEvent
from knowledge.connectors.base import Permission
from knowledge.models import AccessGroup, Document, Source, SyncRun
from knowledge.services.sources import source_create, source_update
from knowledge.services.sync import source_sync, sources_sync_due
from tests.connectors.helpers import member, search_titles, visible_titles
from tests.connectors.scripted import scripted_service
from tests.factories import TenantFactory

pytestmark = pytest.mark.django_db

SECRET_PLAN = "Secret plan"
LUNCH = "Lunch menu"


@pytest.fixture
def service(monkeypatch):
    return scripted_service(monkeypatch)


@pytest.fixture
def tenant():
    return TenantFactory(slug="acme")


@pytest.fixture
def source(tenant, service, settings):
    settings.KB_FETCH_ALLOWED_NETWORKS = ["127.0.0.1/32"]
    return source_create(
        tenant=tenant, name="team-slack", kind="slack", location="http://127.0.0.1:9/", secret="xoxb-token"
    )


@pytest.fixture
def people(tenant):
    return {
        "ann": member(tenant, "Ann@Example.com"),
        "bob": member(tenant, "bob@example.com"),
        "admin": member(tenant, "boss@example.com", role="admin"),
    }


def _world(service):
    service.put("general/1", LUNCH, "The lunch menu has pasta on Friday.")
    service.put("secret/1", SECRET_PLAN, "The secret plan: launch the zeppelin at dawn.", Permission.of(groups=["C2"]))
    service.group("C2", "slack:#secret-plans", ["ann@example.com"])


def test_a_first_sync_maps_a_private_channel_to_its_members_only(source, service, people, tenant):
    _world(service)
    run = source_sync(source=source)
    assert run.status == "done", run.error
    assert run.counts()["new"] == 2
    assert visible_titles(tenant, people["ann"]) == {LUNCH, SECRET_PLAN}
    assert visible_titles(tenant, people["bob"]) == {LUNCH}
    assert visible_titles(tenant, people["admin"]) == {LUNCH, SECRET_PLAN}
    assert search_titles(tenant, people["bob"], "zeppelin dawn") == set()
    assert search_titles(tenant, people["ann"], "zeppelin dawn") == {SECRET_PLAN}
    assert AccessGroup.objects.filter(tenant=tenant, name="slack:#secret-plans").exists()
    assert run.permissions["restricted"] == 1 and run.permissions["public"] == 1


def test_emails_match_whatever_their_case(source, service, people, tenant):
    service.put("dm/1", "Direct note", "A note for Ann only.", Permission.of(emails=["ANN@example.COM"]))
    source_sync(source=source)
    assert visible_titles(tenant, people["ann"]) == {"Direct note"}
    assert visible_titles(tenant, people["bob"]) == set()


def test_a_member_removed_from_the_channel_stops_finding_it_at_the_next_permission_sync(
    source, service, people, tenant
):
    _world(service)
    source_sync(source=source)
    service.group("C2", "slack:#secret-plans", [])  # Ann left the channel
    run = source_sync(source=source, scope="permissions")
    assert run.status == "done", run.error
    assert visible_titles(tenant, people["ann"]) == {LUNCH}
    assert search_titles(tenant, people["ann"], "zeppelin dawn") == set()
    assert "changes" not in service.calls[-4:]  # no content was read


def test_a_person_who_joins_later_is_granted_at_the_next_permission_sync(source, service, tenant):
    service.put("secret/1", SECRET_PLAN, "The zeppelin plan.", Permission.of(groups=["C2"]))
    service.group("C2", "slack:#secret-plans", ["carol@example.com"])
    run = source_sync(source=source)
    assert run.permissions["source_users_not_members"] == 1
    carol = member(tenant, "carol@example.com")
    assert visible_titles(tenant, carol) == set()
    source_sync(source=source, scope="permissions")
    assert visible_titles(tenant, carol) == {SECRET_PLAN}


def test_a_document_whose_permissions_cannot_be_read_is_for_admins_only(source, service, people, tenant):
    _world(service)
    service.permissions_unreadable.add("general/1")
    run = source_sync(source=source)
    assert visible_titles(tenant, people["bob"]) == set()
    assert visible_titles(tenant, people["admin"]) == {LUNCH, SECRET_PLAN}
    assert run.permissions["unreadable"] == 1
    assert any("could not be read" in e["error"] and e["document"] == "general/1" for e in run.errors)


def test_a_restricted_document_whose_readers_are_not_members_stays_restricted(source, service, people, tenant):
    service.put("secret/1", SECRET_PLAN, "The zeppelin plan.", Permission.of(emails=["stranger@else.org"]))
    source_sync(source=source)
    assert visible_titles(tenant, people["bob"]) == set()
    assert visible_titles(tenant, people["admin"]) == {SECRET_PLAN}


def test_a_content_sync_reads_only_what_changed_since_its_checkpoint(source, service, people, tenant):
    _world(service)
    source_sync(source=source)
    service.put("general/1", LUNCH, "The lunch menu has soup on Friday.")
    before = len(service.calls)
    run = source_sync(source=source, scope="content")
    assert run.counts()["updated"] == 1 and run.counts()["new"] == 0
    assert service.seen_checkpoints[-1] == {"clock": 2}  # where the first sync stopped
    source.refresh_from_db()
    assert source.checkpoint == {"clock": 3}
    assert service.calls[before:] == ["changes"]
    assert search_titles(tenant, people["bob"], "soup") == {LUNCH}


def test_a_run_stopped_half_way_resumes_from_its_checkpoint(source, service, tenant):
    for n in range(100):
        service.put(f"general/{n}", f"Note {n}", f"Note number {n} about rivers.")
    service.fail_after = 70
    run = source_sync(source=source, scope="content")
    assert run.status == "failed" and "half-way" in run.error
    assert Document.objects.filter(source=source).count() == 64  # the first full batch was kept
    source.refresh_from_db()
    assert source.checkpoint == {"clock": 64}
    service.fail_after = None
    run = source_sync(source=source, scope="content")
    assert run.status == "done" and run.counts()["new"] == 36
    assert service.seen_checkpoints[-1] == {"clock": 64}


def test_a_deletion_at_the_source_leaves_search_at_the_next_sync(source, service, people, tenant):
    _world(service)
    source_sync(source=source)
    del service.documents["general/1"]
    run = source_sync(source=source, scope="permissions")
    assert run.counts()["deleted"] == 1
    assert visible_titles(tenant, people["bob"]) == set()


def test_an_edit_the_change_feed_missed_is_read_again_by_a_full_sync(source, service, tenant, people):
    _world(service)
    source_sync(source=source)
    service.documents["general/1"].update(text="The lunch menu has curry on Friday.", version=9)  # no clock move
    run = source_sync(source=source)
    assert run.counts()["updated"] == 1
    assert search_titles(tenant, people["bob"], "curry") == {LUNCH}


def test_a_revoked_token_fails_the_run_and_deletes_nothing(source, service, tenant):
    _world(service)
    source_sync(source=source)
    service.revoked = True
    run = source_sync(source=source)
    assert run.status == "failed"
    assert "revoked" in run.error
    assert Document.objects.filter(source=source, deleted_at__isnull=True).count() == 2


def test_permission_syncs_are_scheduled_apart_and_do_not_count_as_syncs_a_day(
    source, service, tenant, settings, django_capture_on_commit_callbacks
):
    settings.KB_QUOTA_SYNCS_PER_DAY = 1
    _world(service)
    source_sync(source=source)
    Source.objects.filter(pk=source.pk).update(last_perm_synced_at=timezone.now() - timedelta(minutes=16))
    with django_capture_on_commit_callbacks(execute=True):
        queued = sources_sync_due()
    runs = SyncRun.objects.filter(pk__in=queued)
    assert [r.scope for r in runs] == ["permissions"]
    assert runs[0].status == "done"
    with django_capture_on_commit_callbacks(execute=True):
        assert sources_sync_due() == []  # done: not due again for 15 minutes


def test_the_secret_is_stored_encrypted_and_never_audited(source, tenant):
    with connection.cursor() as cursor:
        cursor.execute("SELECT secret FROM knowledge_source WHERE id = %s", [source.pk])
        (stored,) = cursor.fetchone()
    assert "xoxb-token" not in stored and stored.startswith("fernet:")
    assert Source.objects.get(pk=source.pk).secret == "xoxb-token"
    source_update(source=source, secret="xoxb-new")
    events = AuditEvent.objects.filter(tenant=tenant, action__startswith="source.")
    assert events.count() == 2
    assert all("xoxb" not in str(e.changes) for e in events)
    assert events.get(action="source.changed").changes == {"secret": "changed"}


def test_a_file_may_not_be_ingested_into_a_synced_source(source, tenant):
    from core.errors import InvalidInput
    from knowledge.services import source_get_or_create

    with pytest.raises(InvalidInput, match="its connector"):
        source_get_or_create(tenant=tenant, name="team-slack", kind="upload")
    assert source_get_or_create(tenant=tenant, name="team-slack", kind="slack") == source
