"""A user of several tenants through the API: the tenant is named by ``X-Tenant`` or by a
membership token, never guessed, and naming a tenant one does not belong to returns no data."""

import pytest
from django.core.management import call_command
from django.db import IntegrityError
from rest_framework.test import APIClient

from core.memberships import membership_token_create
from core.models import Membership
from core.services import membership_create
from knowledge.models import Document
from tests.api.conftest import client_for
from tests.factories import MembershipFactory, TenantFactory

BIKE_QUERY = {"query": "how do I patch a bicycle tyre puncture?", "k": 5}


@pytest.fixture
def both(corpus, other_tenant_corpus):
    """A user who is a member of ``corpus`` and an editor of ``other``."""
    membership = MembershipFactory(tenant=corpus, role=Membership.Role.MEMBER)
    Membership.objects.create(user=membership.user, tenant=other_tenant_corpus, role=Membership.Role.EDITOR)
    return membership.user


def token_client(key: str) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {key}")
    return client


def documents_found(response) -> set[str]:
    assert response.status_code == 200, response.content
    return {r["document"] for r in response.json()["results"]}


def test_a_user_of_several_tenants_naming_none_gets_a_400_that_says_how_to_choose(both, corpus):
    response = client_for(both).post("/api/v1/search/", BIKE_QUERY, format="json")
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["code"] == "tenant_required"
    assert f"({corpus.slug}, other)" in error["message"] or f"(other, {corpus.slug})" in error["message"]
    assert "X-Tenant" in error["message"] and "token of one membership" in error["message"]


def test_the_x_tenant_header_picks_which_tenants_documents_are_searched(both, corpus):
    client = client_for(both)
    other = client.post("/api/v1/search/", BIKE_QUERY, format="json", HTTP_X_TENANT="other")
    assert documents_found(other) == {"secret/bike"}
    own = client.post("/api/v1/search/", BIKE_QUERY, format="json", HTTP_X_TENANT=corpus.slug)
    assert "secret/bike" not in documents_found(own)
    assert "howto/bike-tyre" in documents_found(own)


def test_naming_a_tenant_one_does_not_belong_to_is_a_403_worded_the_same_whether_it_exists_or_not(both):
    TenantFactory(slug="third")
    client = client_for(both)
    replies = [
        client.post("/api/v1/search/", BIKE_QUERY, format="json", HTTP_X_TENANT=slug) for slug in ("third", "nowhere")
    ]
    assert [r.status_code for r in replies] == [403, 403]
    messages = [r.json()["error"]["message"].replace("'third'", "'X'").replace("'nowhere'", "'X'") for r in replies]
    assert messages[0] == messages[1] == "You are not a member of a tenant 'X'."
    assert "results" not in replies[0].json()


def test_a_one_tenant_user_naming_another_tenant_gets_a_403_and_no_documents(corpus, other_tenant_corpus, member):
    response = client_for(member).get("/api/v1/documents/", HTTP_X_TENANT="other")
    assert response.status_code == 403
    assert "secret" not in response.content.decode()


def test_a_one_tenant_user_needs_no_header(corpus, member):
    assert "howto/bike-tyre" in documents_found(client_for(member).post("/api/v1/search/", BIKE_QUERY, format="json"))


def test_a_membership_token_acts_in_its_tenant_without_a_header(both, other_tenant_corpus):
    _, key = membership_token_create(membership=Membership.objects.get(user=both, tenant=other_tenant_corpus))
    assert key.startswith("kbm_")
    listed = token_client(key).get("/api/v1/documents/")
    assert listed.status_code == 200
    assert [d["external_id"] for d in listed.json()["results"]] == ["secret/bike"]


def test_a_membership_token_refuses_a_header_naming_another_tenant(both, corpus, other_tenant_corpus):
    _, key = membership_token_create(membership=Membership.objects.get(user=both, tenant=other_tenant_corpus))
    response = token_client(key).post("/api/v1/search/", BIKE_QUERY, format="json", HTTP_X_TENANT=corpus.slug)
    assert response.status_code == 403
    assert response.json()["error"]["message"] == f"This API token belongs to tenant 'other', not {corpus.slug!r}."


def test_an_unknown_or_revoked_membership_token_is_a_401(both, other_tenant_corpus):
    token, key = membership_token_create(membership=Membership.objects.get(user=both, tenant=other_tenant_corpus))
    assert token_client(key + "0").get("/api/v1/documents/").status_code == 401
    token.delete()
    assert token_client(key).get("/api/v1/documents/").status_code == 401


def test_a_membership_token_stops_working_when_its_membership_is_removed(both, other_tenant_corpus):
    membership = Membership.objects.get(user=both, tenant=other_tenant_corpus)
    _, key = membership_token_create(membership=membership)
    membership.delete()
    assert token_client(key).get("/api/v1/documents/").status_code == 401


def test_only_the_digest_of_a_membership_token_is_stored(both, corpus):
    token, key = membership_token_create(membership=Membership.objects.get(user=both, tenant=corpus))
    token.refresh_from_db()
    assert key not in (token.digest, token.prefix) and token.prefix == key[:12] and len(token.digest) == 64


def test_roles_are_per_tenant(both, corpus, other_tenant_corpus):
    """Member in ``corpus`` (may not delete), editor in ``other`` (may)."""
    client = client_for(both)
    own = Document.objects.for_tenant(corpus).first()
    secret = Document.objects.for_tenant(other_tenant_corpus).get()
    refused = client.delete(f"/api/v1/documents/{own.pk}/", HTTP_X_TENANT=corpus.slug)
    assert refused.status_code == 403
    assert Document.objects.filter(pk=own.pk).exists()
    # The other tenant's id while acting in this tenant: not found, not deleted.
    assert client.delete(f"/api/v1/documents/{secret.pk}/", HTTP_X_TENANT=corpus.slug).status_code in (403, 404)
    assert Document.objects.filter(pk=secret.pk).exists()
    assert client.delete(f"/api/v1/documents/{secret.pk}/", HTTP_X_TENANT="other").status_code == 204
    assert not Document.objects.filter(pk=secret.pk).exists()


def test_a_profile_is_kept_per_tenant(both, corpus):
    client = client_for(both)
    saved = client.patch(
        "/api/v1/profile/",
        {"title": "Cook", "preferred_sources": ["handbook"]},
        format="json",
        HTTP_X_TENANT=corpus.slug,
    )
    assert saved.status_code == 200, saved.content
    other = client.get("/api/v1/profile/", HTTP_X_TENANT="other")
    assert other.status_code == 200 and other.json()["title"] == "" and other.json()["preferred_sources"] == []
    # The other tenant's source names are not this tenant's.
    refused = client.patch(
        "/api/v1/profile/", {"preferred_sources": ["handbook"]}, format="json", HTTP_X_TENANT="other"
    )
    assert refused.status_code == 400
    assert client.get("/api/v1/profile/", HTTP_X_TENANT=corpus.slug).json()["title"] == "Cook"


def test_conversations_are_listed_per_tenant(both, corpus):
    client = client_for(both)
    asked = client.post(
        "/api/v1/ask/",
        {"question": "How long should spaghetti cook?", "extractive": True},
        format="json",
        HTTP_X_TENANT=corpus.slug,
    )
    assert asked.status_code == 200, asked.content
    conversation = asked.json()["conversation_id"]
    assert [c["id"] for c in client.get("/api/v1/conversations/", HTTP_X_TENANT=corpus.slug).json()["results"]] == [
        conversation
    ]
    assert client.get("/api/v1/conversations/", HTTP_X_TENANT="other").json()["results"] == []
    assert client.get(f"/api/v1/conversations/{conversation}/", HTTP_X_TENANT="other").status_code == 404


def test_one_membership_per_user_and_tenant(both, corpus):
    with pytest.raises(IntegrityError):
        Membership.objects.create(user=both, tenant=corpus, role=Membership.Role.VIEWER)


def test_adding_a_user_to_a_second_tenant_keeps_the_first(member, corpus, other_tenant_corpus):
    membership_create(tenant=other_tenant_corpus, username=member.username, password="pass-word-123", role="viewer")
    roles = dict(Membership.objects.filter(user=member).values_list("tenant__slug", "role"))
    assert roles == {corpus.slug: "member", "other": "viewer"}


def test_the_membershiptoken_command_prints_a_working_key(both, other_tenant_corpus, capsys):
    call_command("membershiptoken", "other", both.username, "--name", "bot")
    key = capsys.readouterr().out.strip()
    assert [d["external_id"] for d in token_client(key).get("/api/v1/documents/").json()["results"]] == ["secret/bike"]


def test_the_membershiptoken_command_refuses_a_tenant_the_user_is_not_in(member, other_tenant_corpus):
    from django.core.management.base import CommandError

    with pytest.raises(CommandError, match="does not belong to this tenant"):
        call_command("membershiptoken", "other", member.username)


def test_resolving_the_tenant_costs_one_query_per_request(both, corpus, rf, django_assert_num_queries):
    from core.memberships import membership_for_request, tenant_for_request

    request = rf.get("/api/v1/documents/", HTTP_X_TENANT=corpus.slug)
    request.user, request.session = both, {}
    with django_assert_num_queries(1):
        assert membership_for_request(request).tenant == corpus
        assert tenant_for_request(request) == corpus
