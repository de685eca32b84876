"""The sources page shows the tenant's usage against its quotas to its owners and admins only."""

import re

import pytest
from django.urls import reverse

from core.models import Membership
from knowledge.models import TenantQuota
from knowledge.quotas import usage_count
from tests.factories import MembershipFactory, SourceFactory

SOURCES = reverse("portal:sources")


@pytest.fixture(autouse=True)
def installation_defaults(settings):
    for name in ("DOCUMENTS", "STORED_MB", "CHUNKS", "SOURCES", "LLM_TOKENS_PER_DAY"):
        setattr(settings, f"KB_QUOTA_{name}", None)
    settings.KB_QUOTA_SYNCS_PER_DAY = 500


def usage_rows(html: str) -> dict[str, list[str]]:
    """{quota label: [used, limit, remaining]} of the page's usage table (tags and spaces squeezed)."""
    table = re.search(r'<table class="sources usage">(.*?)</table>', html, re.S)
    assert table, "no usage table"
    rows = {}
    for row in re.findall(r"<tr[^>]*>(.*?)</tr>", table.group(1), re.S)[1:]:
        cells = [
            " ".join(re.sub(r"<[^>]+>", " ", cell).split())
            for cell in re.findall(r"<t[hd][^>]*>(.*?)</t[hd]>", row, re.S)
        ]
        rows[cells[0]] = cells[1:]
    return rows


def test_an_admin_sees_usage_against_each_limit_on_the_sources_page(client, corpus, admin_member, other_tenant_corpus):
    TenantQuota.objects.create(tenant=corpus, max_documents=3, max_sources=10)
    SourceFactory.create_batch(5, tenant=other_tenant_corpus)
    client.force_login(admin_member)

    rows = usage_rows(client.get(SOURCES).content.decode())

    assert rows["Documents"] == ["3", "3", "none: ask the operator to raise the limit"]
    assert rows["Sources"] == ["1", "10", "9"]  # the other tenant's six sources are not counted
    assert rows["Syncs (last 24 hours)"] == ["0", "500", "500"]
    assert rows["LLM tokens (last 24 hours)"] == ["0", "unlimited", "unlimited"]
    held = usage_count(tenant=corpus, names=["stored_bytes"])["stored_bytes"]
    assert rows["Stored text"] == [f"{held:,} bytes", "unlimited", "unlimited"]


def test_members_and_editors_do_not_see_the_usage_table(client, corpus, member):
    editor = MembershipFactory(tenant=corpus, role=Membership.Role.EDITOR).user
    for user in (member, editor):
        client.force_login(user)
        page = client.get(SOURCES)
        assert page.status_code == 200
        assert "Usage and limits" not in page.content.decode()
