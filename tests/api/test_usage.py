"""GET /api/v1/usage/: a tenant's owners and admins read its usage against each quota, and only its own."""

import pytest

from core.models import Membership
from knowledge.models import LLMUsage, TenantQuota
from knowledge.quotas import MB, usage_count
from tests.api.conftest import client_for
from tests.factories import MembershipFactory, SourceFactory

QUOTA_NAMES = ["documents", "stored_bytes", "chunks", "sources", "syncs_per_day", "llm_tokens_per_day"]


@pytest.fixture(autouse=True)
def installation_defaults(settings):
    """The shipped defaults: only syncs a day are limited."""
    for name in ("DOCUMENTS", "STORED_MB", "CHUNKS", "SOURCES", "LLM_TOKENS_PER_DAY"):
        setattr(settings, f"KB_QUOTA_{name}", None)
    settings.KB_QUOTA_SYNCS_PER_DAY = 500


def test_an_admin_reads_each_quotas_limit_usage_and_remaining(corpus, admin_client):
    TenantQuota.objects.create(tenant=corpus, max_documents=10, max_stored_bytes=MB, max_llm_tokens_per_day=5000)
    LLMUsage.objects.create(tenant=corpus, purpose="answer", tokens_in=1200, tokens_out=300)
    held = usage_count(tenant=corpus)

    response = admin_client.get("/api/v1/usage/")

    assert response.status_code == 200
    usage = response.json()
    assert usage["tenant"] == corpus.slug
    assert set(usage) == {"tenant", *QUOTA_NAMES}
    assert usage["documents"] == {"limit": 10, "used": 3, "remaining": 7}
    assert usage["stored_bytes"] == {"limit": MB, "used": held["stored_bytes"], "remaining": MB - held["stored_bytes"]}
    assert usage["chunks"] == {"limit": None, "used": held["chunks"], "remaining": None}
    assert usage["sources"] == {"limit": None, "used": 1, "remaining": None}
    assert usage["syncs_per_day"] == {"limit": 500, "used": 0, "remaining": 500}
    assert usage["llm_tokens_per_day"] == {"limit": 5000, "used": 1500, "remaining": 3500}


def test_remaining_is_zero_not_negative_once_an_operator_lowers_a_limit_below_the_usage(corpus, admin_client):
    TenantQuota.objects.create(tenant=corpus, max_documents=1)

    assert admin_client.get("/api/v1/usage/").json()["documents"] == {"limit": 1, "used": 3, "remaining": 0}


def test_an_owner_reads_the_usage_and_members_and_editors_may_not(corpus, member_client, editor_client):
    owner = client_for(MembershipFactory(tenant=corpus, role=Membership.Role.OWNER).user)

    assert owner.get("/api/v1/usage/").status_code == 200
    for client in (member_client, editor_client):
        response = client.get("/api/v1/usage/")
        assert response.status_code == 403
        assert response.json()["error"] == {
            "code": "permission_denied",
            "message": "Only the tenant's owners and admins may read its usage.",
        }


def test_another_tenants_usage_is_never_shown(corpus, other_tenant_corpus, admin_client, other_admin_client):
    SourceFactory.create_batch(4, tenant=other_tenant_corpus)
    TenantQuota.objects.create(tenant=other_tenant_corpus, max_sources=9)

    ours = admin_client.get("/api/v1/usage/").json()
    theirs = other_admin_client.get("/api/v1/usage/").json()
    named = admin_client.get("/api/v1/usage/", HTTP_X_TENANT=other_tenant_corpus.slug)

    assert (ours["tenant"], ours["documents"]["used"], ours["sources"]) == (
        corpus.slug,
        3,
        {"limit": None, "used": 1, "remaining": None},
    )
    assert (theirs["tenant"], theirs["documents"]["used"], theirs["sources"]) == (
        other_tenant_corpus.slug,
        1,
        {"limit": 9, "used": 5, "remaining": 4},
    )
    assert named.status_code == 403


def test_the_usage_needs_a_signed_in_caller(corpus, client):
    assert client.get("/api/v1/usage/").status_code in (401, 403)


def test_quotas_cannot_be_changed_through_the_api(corpus, admin_client):
    for method in ("post", "put", "patch", "delete"):
        response = getattr(admin_client, method)("/api/v1/usage/", {"documents": {"limit": 10**9}}, format="json")
        assert response.status_code == 405, method

    assert not TenantQuota.objects.filter(tenant=corpus).exists()
