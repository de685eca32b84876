"""Quotas: the limits (own or the installation's), usage counted from the tables, the check and
its error, setting limits (service, CLI, admin) with the audit trail."""

import json
import threading
from datetime import timedelta
from io import StringIO

import pytest
from django.contrib.auth.models import Permission
from django.core.management import CommandError, call_command
from django.db import connection, transaction
from django.urls import reverse
from django.utils import timezone

from core.errors import InvalidInput
from core.models import AuditEvent
from knowledge.models import SUMMARY_ORDINAL, Chunk, SyncRun, TenantQuota
from knowledge.quotas.limits import MB, QuotaExceeded, quota_limits, quota_lock_key, quota_set
from knowledge.quotas.usage import quota_check, sync_quota_check, usage_count
from tests.factories import (
    ChunkFactory,
    DocumentFactory,
    DocumentVersionFactory,
    SourceFactory,
    TenantFactory,
    UserFactory,
)


@pytest.fixture(autouse=True)
def no_installation_limits(settings):
    """No installation-wide limit unless a test sets one (syncs a day default to 500)."""
    for name in ("DOCUMENTS", "STORED_MB", "CHUNKS", "SOURCES", "SYNCS_PER_DAY", "LLM_TOKENS_PER_DAY"):
        setattr(settings, f"KB_QUOTA_{name}", None)


def run_created(source, *, hours_ago: float) -> SyncRun:
    """A finished sync run of ``source`` that started ``hours_ago`` hours ago."""
    run = SyncRun.objects.create(tenant=source.tenant, source=source, status=SyncRun.Status.DONE)
    SyncRun.objects.filter(pk=run.pk).update(created_at=timezone.now() - timedelta(hours=hours_ago))
    return run


def test_a_tenant_without_limits_of_its_own_gets_the_installation_defaults(tenant, settings):
    settings.KB_QUOTA_DOCUMENTS = 100
    settings.KB_QUOTA_STORED_MB = 2
    settings.KB_QUOTA_SYNCS_PER_DAY = 500

    assert quota_limits(tenant=tenant) == {
        "documents": 100,
        "stored_bytes": 2 * MB,
        "chunks": None,
        "sources": None,
        "syncs_per_day": 500,
        "llm_tokens_per_day": None,
    }


def test_a_tenants_own_limit_wins_over_the_installation_default_and_an_empty_one_falls_back(tenant, settings):
    settings.KB_QUOTA_DOCUMENTS = 100
    settings.KB_QUOTA_SYNCS_PER_DAY = 500
    TenantQuota.objects.create(tenant=tenant, max_documents=5, max_chunks=0)

    limits = quota_limits(tenant=tenant)

    assert (limits["documents"], limits["chunks"], limits["syncs_per_day"]) == (5, 0, 500)


def test_usage_counts_live_documents_every_versions_text_body_chunks_sources_and_the_last_days_syncs(tenant):
    source = SourceFactory(tenant=tenant)
    SourceFactory(tenant=tenant)
    kept = DocumentFactory(source=source)
    old = DocumentVersionFactory(document=kept, text="ab", is_current=False)
    DocumentVersionFactory(document=kept, text="héllo")  # 6 bytes in UTF-8
    ChunkFactory(version=old, is_current=False)
    ChunkFactory(version=kept.versions.get(is_current=True))
    ChunkFactory(version=kept.versions.get(is_current=True), kind=Chunk.Kind.SUMMARY, ordinal=SUMMARY_ORDINAL)
    gone = DocumentFactory(source=source, deleted_at=timezone.now())
    DocumentVersionFactory(document=gone, text="xyz", is_current=False)
    run_created(source, hours_ago=2)
    run_created(source, hours_ago=25)
    other = TenantFactory()
    DocumentVersionFactory(document=DocumentFactory(source=SourceFactory(tenant=other)), text="not ours")

    assert usage_count(tenant=tenant) == {
        "documents": 1,  # the one deleted at its source is not counted
        "stored_bytes": 2 + 6 + 3,  # every version's text, the deleted document's included
        "chunks": 2,  # body chunks of old and current versions, not the summary
        "sources": 2,
        "syncs_per_day": 1,
    }


def test_a_write_within_the_limits_passes_and_one_past_a_limit_is_refused_with_the_figures(tenant):
    TenantQuota.objects.create(tenant=tenant, max_documents=3)
    source = SourceFactory(tenant=tenant)
    DocumentFactory(source=source)
    DocumentFactory(source=source)

    quota_check(tenant=tenant, documents=1)  # 3 of 3
    with pytest.raises(QuotaExceeded) as refused:
        quota_check(tenant=tenant, documents=2)

    error = refused.value
    assert (error.code, error.status, error.limit, error.used, error.adding) == ("quota_exceeded", 403, 3, 2, 2)
    assert error.message == (
        "This tenant may keep 3 documents and has 2; this would add 2; ask the operator to raise the limit."
    )


def test_the_message_of_a_full_quota_gives_the_limit_and_the_amount_held(tenant):
    SourceFactory.create_batch(3, tenant=tenant)
    TenantQuota.objects.create(tenant=tenant, max_sources=3)

    with pytest.raises(QuotaExceeded, match=r"^This tenant may keep 3 sources and has 3; ask the operator"):
        quota_check(tenant=tenant, sources=1)


def test_a_write_that_adds_nothing_of_a_kind_passes_even_over_that_limit(tenant):
    source = SourceFactory(tenant=tenant)
    DocumentFactory.create_batch(2, source=source)
    TenantQuota.objects.create(tenant=tenant, max_documents=1, max_stored_bytes=10**6)

    quota_check(tenant=tenant, stored_bytes=100)  # an update: new text, no new document


def test_a_limit_of_zero_allows_none(tenant):
    TenantQuota.objects.create(tenant=tenant, max_chunks=0)

    with pytest.raises(QuotaExceeded, match="may keep 0 chunks and has 0"):
        quota_check(tenant=tenant, chunks=1)


def test_a_stored_amount_over_its_limit_is_403_and_a_per_day_amount_429(tenant):
    TenantQuota.objects.create(tenant=tenant, max_sources=0, max_syncs_per_day=0)

    with pytest.raises(QuotaExceeded) as stored:
        quota_check(tenant=tenant, sources=1)
    with pytest.raises(QuotaExceeded) as per_day:
        sync_quota_check(tenant=tenant)

    assert (stored.value.status, per_day.value.status) == (403, 429)
    assert per_day.value.message == (
        "This tenant may run 0 syncs a day and has run 0 in the last 24 hours; "
        "try again later or ask the operator to raise the limit."
    )


def test_setting_limits_records_each_change_with_before_and_after_in_the_audit_log(tenant):
    changes = quota_set(tenant=tenant, limits={"documents": 1000, "stored_bytes": 5 * MB})
    again = quota_set(tenant=tenant, limits={"documents": 2000, "stored_bytes": 5 * MB})
    cleared = quota_set(tenant=tenant, limits={"documents": None})

    assert changes == {"max_documents": [None, 1000], "max_stored_bytes": [None, 5 * MB]}
    assert again == {"max_documents": [1000, 2000]}
    assert cleared == {"max_documents": [2000, None]}
    events = AuditEvent.objects.filter(tenant=tenant, action="quota.changed").order_by("pk")
    assert [event.changes for event in events] == [changes, again, cleared]
    assert quota_limits(tenant=tenant)["documents"] is None


def test_setting_an_unknown_quota_or_a_negative_limit_is_refused_and_changes_nothing(tenant):
    with pytest.raises(InvalidInput, match="Unknown quota"):
        quota_set(tenant=tenant, limits={"pages": 10})
    with pytest.raises(InvalidInput, match="0 or more"):
        quota_set(tenant=tenant, limits={"documents": 5, "chunks": -1})

    assert not TenantQuota.objects.filter(tenant=tenant).exists()
    assert not AuditEvent.objects.filter(action="quota.changed").exists()


# --- manage.py quota --------------------------------------------------------------------------


def quota_command(*args) -> str:
    out = StringIO()
    call_command("quota", *args, stdout=out)
    return out.getvalue()


def test_the_quota_command_sets_limits_and_prints_usage_against_them_as_json(tenant):
    SourceFactory(tenant=tenant)

    printed = json.loads(
        quota_command(tenant.slug, "--documents", "1000", "--stored-mb", "2", "--sources", "1", "--json")
    )

    assert printed["tenant"] == tenant.slug
    assert printed["changed"] == {
        "max_documents": [None, 1000],
        "max_stored_bytes": [None, 2 * MB],
        "max_sources": [None, 1],
    }
    assert printed["quotas"]["documents"] == {"limit": 1000, "used": 0, "remaining": 1000, "own": True}
    assert printed["quotas"]["sources"] == {"limit": 1, "used": 1, "remaining": 0, "own": True}
    assert printed["quotas"]["chunks"] == {"limit": None, "used": 0, "remaining": None, "own": False}
    event = AuditEvent.objects.get(tenant=tenant, action="quota.changed")
    assert event.actor_label == "operator (CLI)"
    assert event.changes == printed["changed"]


def test_the_quota_command_prints_a_table_marking_the_installation_defaults(tenant, settings):
    settings.KB_QUOTA_SYNCS_PER_DAY = 500
    quota_command(tenant.slug, "--documents", "1,000")

    table = quota_command(tenant.slug)

    assert "Documents" in table and "1,000 " in table
    assert "500*" in table  # syncs: the installation's default
    assert "unlimited*" in table


def test_the_quota_command_clears_a_limit_with_default_and_refuses_unlimited_over_a_finite_default(tenant, settings):
    settings.KB_QUOTA_SYNCS_PER_DAY = 500
    quota_command(tenant.slug, "--syncs-per-day", "20", "--documents", "10")

    quota_command(tenant.slug, "--syncs-per-day", "default", "--documents", "unlimited")
    with pytest.raises(CommandError, match="limits every tenant to 500 by default"):
        quota_command(tenant.slug, "--syncs-per-day", "unlimited")
    with pytest.raises(CommandError, match="not a whole number"):
        quota_command(tenant.slug, "--chunks", "-3")
    with pytest.raises(CommandError, match="No tenant 'nobody'"):
        quota_command("nobody")

    assert quota_limits(tenant=tenant)["syncs_per_day"] == 500
    assert quota_limits(tenant=tenant)["documents"] is None


# --- The admin ------------------------------------------------------------------------------------


def test_a_superuser_sets_a_tenants_limits_in_the_admin_and_the_change_is_audited(client, tenant):
    client.force_login(UserFactory(is_staff=True, is_superuser=True))
    fields = {"tenant": tenant.pk, "max_documents": "50", "max_stored_bytes": "", "max_chunks": ""}
    fields |= {"max_sources": "", "max_syncs_per_day": "", "max_llm_tokens_per_day": ""}

    assert client.get(reverse("admin:knowledge_tenantquota_add")).status_code == 200
    response = client.post(reverse("admin:knowledge_tenantquota_add"), fields)

    assert response.status_code == 302, response.context["adminform"].form.errors
    quota = TenantQuota.objects.get(tenant=tenant)
    assert quota.max_documents == 50
    assert AuditEvent.objects.get(action="quota.changed").changes == {"max_documents": [None, 50]}
    page = client.get(reverse("admin:knowledge_tenantquota_change", args=[quota.pk]))
    assert page.status_code == 200
    assert b"Documents" in page.content and b"50" in page.content


def test_a_tenant_admin_holding_every_core_and_knowledge_permission_cannot_see_or_change_quotas_in_the_admin(
    client, tenant, admin_member
):
    admin_member.user_permissions.set(Permission.objects.filter(content_type__app_label__in=["core", "knowledge"]))
    client.force_login(admin_member)
    quota = TenantQuota.objects.create(tenant=tenant, max_documents=10)

    assert client.get(reverse("admin:knowledge_tenantquota_changelist")).status_code == 403
    assert client.get(reverse("admin:knowledge_tenantquota_change", args=[quota.pk])).status_code == 403
    response = client.post(
        reverse("admin:knowledge_tenantquota_change", args=[quota.pk]), {"tenant": tenant.pk, "max_documents": "100000"}
    )
    assert response.status_code == 403
    assert TenantQuota.objects.get(pk=quota.pk).max_documents == 10
    assert b"tenantquota" not in client.get(reverse("admin:index")).content


def lock_free_in_another_session(*keys: tuple[int, int]) -> list[bool]:
    """Whether another database session could take each advisory lock ``keys`` right now."""
    free: list[bool] = []

    def probe():
        try:
            with connection.cursor() as cursor:  # this thread's own connection
                for key in keys:
                    cursor.execute("SELECT pg_try_advisory_lock(%s, %s)", key)
                    taken = cursor.fetchone()[0]
                    if taken:
                        cursor.execute("SELECT pg_advisory_unlock(%s, %s)", key)
                    free.append(taken)
        finally:
            connection.close()

    thread = threading.Thread(target=probe)
    thread.start()
    thread.join(timeout=30)
    return free


def test_a_check_inside_a_transaction_holds_the_tenants_lock_so_concurrent_writers_check_in_turn(tenant):
    TenantQuota.objects.create(tenant=tenant, max_documents=10)
    unlimited = TenantFactory()

    with transaction.atomic():
        quota_check(tenant=tenant, documents=1)
        quota_check(tenant=unlimited, documents=1)
        free = lock_free_in_another_session(quota_lock_key(tenant=tenant), quota_lock_key(tenant=unlimited))

    assert free == [False, True]  # a tenant without a limit never waits
