"""Single sign-on end to end against a real OpenID Connect provider on loopback
(django-oauth-toolkit, ``tests/sso/provider/``): the authorization code flow with PKCE, the ID
token verified against the provider's JWKS (RS256), claims mapped to the membership's role and to
access groups, memberships made at first sign-in only where the tenant allows it, and every
sign-in and refusal in the audit log."""

from urllib.parse import parse_qs, urlsplit

import pytest
from django.contrib.auth import get_user_model
from django.urls import reverse

from core.models import AuditEvent, Membership
from core.rls import rls_bypass
from sso.models import Identity
from sso.providers import metadata_get, tenant_provider
from tests.factories import AccessGroupFactory, MembershipFactory, TenantFactory, UserFactory
from tests.sso.conftest import CLIENT_ID, CLIENT_SECRET, TENANT, USERS, local, provider_sign_in

User = get_user_model()
START = f"/sso/tenant/{TENANT}/login/"


def events(action: str) -> list[AuditEvent]:
    with rls_bypass():
        return list(AuditEvent.objects.filter(action=action).order_by("id"))


def sign_in(client, username: str, *, start: str = START, password: str | None = None):
    """Start at ``start``, sign in at the provider, and return our callback's response."""
    started = client.get(start)
    assert started.status_code == 302, started.content[:500]
    back = provider_sign_in(started["Location"], username, password or USERS[username]["password"])
    return client.get(local(back))


def signed_in_as(client):
    response = client.get(reverse("portal:ask"))
    return response.wsgi_request.user if response.status_code == 200 else None


def test_a_member_signs_in_through_the_tenants_provider_with_pkce_and_lands_on_the_portal(client, acme, acme_sso):
    ann = UserFactory(username="ann.lee", email="ann@acme.example")
    MembershipFactory(user=ann, tenant=acme, role="member")

    started = client.get(START + "?next=/conversations/")
    query = parse_qs(urlsplit(started["Location"]).query)
    assert query["code_challenge_method"] == ["S256"] and len(query["code_challenge"][0]) >= 43
    assert query["client_id"] == [CLIENT_ID] and "openid" in query["scope"][0].split() and query["nonce"]
    back = provider_sign_in(started["Location"], "ann", USERS["ann"]["password"])
    response = client.get(local(back))

    assert response.status_code == 302 and response["Location"] == "/conversations/"
    assert signed_in_as(client) == ann  # the existing account, matched by its verified email and linked
    assert Identity.objects.get(user=ann).issuer == acme_sso.issuer
    [event] = events("signin.succeeded")
    assert event.tenant_id == acme.pk and event.actor_id == ann.pk
    assert event.changes == {"provider": "Acme IdP", "issuer": acme_sso.issuer}


def test_the_role_claim_sets_the_membership_role_and_the_groups_claim_the_access_groups(client, acme, acme_sso):
    ann = UserFactory(username="ann", email="ann@acme.example")
    MembershipFactory(user=ann, tenant=acme, role="member")
    finance = AccessGroupFactory(tenant=acme, name="finance")
    legal = AccessGroupFactory(tenant=acme, name="legal")
    legal.members.add(ann)

    sign_in(client, "ann")

    assert Membership.objects.get(user=ann, tenant=acme).role == "editor"  # kb_roles: kb-editors -> editor
    assert list(finance.members.all()) == [ann] and list(legal.members.all()) == []
    [role] = events("membership.role_changed")
    assert role.changes == {"role": ["member", "editor"]} and role.actor_label == "system (single sign-on)"
    assert {tuple(e.changes["members"][1]) for e in events("access_group.changed")} == {("ann",), ()}


def test_a_changed_role_at_the_provider_changes_the_membership_at_the_next_sign_in(client, acme, acme_sso, idp):
    ann = UserFactory(username="ann", email="ann@acme.example")
    MembershipFactory(user=ann, tenant=acme, role="editor")
    sign_in(client, "ann")
    assert Membership.objects.get(user=ann, tenant=acme).role == "editor"

    claims = {**USERS["ann"]["claims"], "kb_roles": ["kb-editors", "kb-admins"], "email": "ann@new.example"}
    idp.users_set({**USERS, "ann": {**USERS["ann"], "claims": claims}})
    client.logout()
    sign_in(client, "ann")

    assert signed_in_as(client) == ann  # the link holds though the email changed
    assert Membership.objects.get(user=ann, tenant=acme).role == "admin"  # the highest role matched
    ann.refresh_from_db()
    assert not ann.is_staff  # a provider never grants the admin site


def test_a_new_user_gets_an_account_and_a_membership_at_first_sign_in_when_the_tenant_allows_it(client, acme, acme_sso):
    acme_sso.create_memberships = True
    acme_sso.save()
    UserFactory(username="zed")  # taken here: the new account gets another name

    response = sign_in(client, "zed")

    assert response.status_code == 302
    user = signed_in_as(client)
    assert user.username == "zed-2" and user.email == "zed@elsewhere.example" and not user.has_usable_password()
    assert Membership.objects.get(user=user, tenant=acme).role == "member"  # no role matched: the default
    [created] = events("membership.created")
    assert created.tenant_id == acme.pk and created.actor_label == "system (single sign-on)"
    assert events("signin.succeeded")[0].changes["provider"] == "Acme IdP"


def test_a_user_without_a_membership_gets_a_clear_page_and_nothing_is_created_when_auto_create_is_off(
    client, acme, acme_sso
):
    users_before = User.objects.count()

    response = sign_in(client, "zed")

    assert response.status_code == 403
    text = response.content.decode()
    assert "Not signed in" in text and "not a member of Acme" in text and "Acme IdP" in text
    assert signed_in_as(client) is None
    assert User.objects.count() == users_before and not Identity.objects.exists()
    [failed] = events("signin.failed")
    assert failed.tenant_id == acme.pk and failed.actor_label == "anonymous"
    assert failed.changes == {
        "provider": "Acme IdP",
        "issuer": acme_sso.issuer,
        "reason": "no_membership",
        "subject": failed.changes["subject"],
        "username": "zed",
    }


def test_a_callback_with_a_state_this_browser_never_started_is_refused_and_recorded(client, acme, acme_sso):
    started = client.get(START)
    back = provider_sign_in(started["Location"], "ann", USERS["ann"]["password"])
    other_browser = type(client)()

    response = other_browser.get(local(back))

    assert response.status_code == 400 and "state does not match" in response.content.decode()
    assert signed_in_as(other_browser) is None
    [failed] = events("signin.failed")
    assert failed.changes["reason"] == "bad_state" and failed.changes["provider"] == "Acme IdP"


def test_an_error_from_the_provider_is_shown_and_recorded(client, acme, acme_sso):
    started = client.get(START)
    state = parse_qs(urlsplit(started["Location"]).query)["state"][0]

    response = client.get(
        f"/sso/tenant/{TENANT}/callback/?error=access_denied&error_description=Denied+by+policy&state={state}"
    )

    assert response.status_code == 400 and "Denied by policy" in response.content.decode()
    [failed] = events("signin.failed")
    assert failed.changes["reason"] == "provider_error" and failed.tenant_id == acme.pk


def test_an_id_token_whose_signature_does_not_match_the_providers_keys_is_refused(client, acme, acme_sso, monkeypatch):
    from joserfc.jwk import RSAKey

    ann = UserFactory(username="ann", email="ann@acme.example")
    MembershipFactory(user=ann, tenant=acme)
    provider = tenant_provider(slug=TENANT)
    real = metadata_get(provider)
    # Another key under the provider's key id: the token's signature cannot verify against it.
    forged = {
        "keys": [{**RSAKey.generate_key(2048).as_dict(private=False), "kid": k["kid"]} for k in real["jwks"]["keys"]]
    }
    monkeypatch.setattr("sso.providers.metadata_get", lambda p: {**real, "jwks": forged})

    response = sign_in(client, "ann")

    assert response.status_code == 400 and "could not be verified" in response.content.decode()
    assert signed_in_as(client) is None and not Identity.objects.exists()
    assert events("signin.failed")[0].changes["reason"] == "invalid_token"


def test_a_tenants_provider_never_links_an_account_that_belongs_to_another_tenant_too(client, acme, acme_sso):
    ann = UserFactory(username="ann", email="ann@acme.example")
    MembershipFactory(user=ann, tenant=acme)
    MembershipFactory(user=ann, tenant=TenantFactory(slug="globex"))

    response = sign_in(client, "ann")

    assert response.status_code == 403 and "cannot be linked" in response.content.decode()
    assert signed_in_as(client) is None and not Identity.objects.exists()
    reasons = [e.changes["reason"] for e in events("signin.failed")]
    assert reasons == ["account_not_linkable"]


def test_a_tenants_provider_reaches_loopback_only_with_the_operators_allowance(client, acme, acme_sso, settings):
    settings.KB_FETCH_ALLOWED_NETWORKS = []

    response = client.get(START)

    assert response.status_code == 502 and "cannot be reached" in response.content.decode()
    [failed] = events("signin.failed")
    assert failed.changes["reason"] == "provider_unavailable"


def test_the_installation_provider_maps_into_the_tenants_that_use_it(client, acme, idp, settings):
    from sso.services import tenant_sso_save

    settings.KB_FETCH_ALLOWED_NETWORKS = []  # the operator's own provider is not held to the guard
    settings.KB_OIDC_ISSUER, settings.KB_OIDC_NAME = idp.issuer, "Company login"
    settings.KB_OIDC_CLIENT_ID, settings.KB_OIDC_CLIENT_SECRET = CLIENT_ID, CLIENT_SECRET
    tenant_sso_save(
        tenant=acme,
        values={"create_memberships": True, "role_claim": "kb_roles", "role_values": {"kb-editors": "editor"}},
    )
    untouched = TenantFactory(slug="globex")

    response = sign_in(client, "ann", start="/sso/login/")

    assert response.status_code == 302
    user = signed_in_as(client)
    assert Membership.objects.get(user=user, tenant=acme).role == "editor"
    assert not Membership.objects.filter(user=user, tenant=untouched).exists()
    assert events("signin.succeeded")[0].changes == {"provider": "Company login", "issuer": idp.issuer}


def test_an_unknown_or_switched_off_provider_is_a_404(client, acme, acme_sso):
    assert client.get("/sso/tenant/nobody/login/").status_code == 404
    assert client.get("/sso/login/").status_code == 404  # no installation provider configured
    acme_sso.enabled = False
    acme_sso.save()
    assert client.get(START).status_code == 404


@pytest.mark.parametrize("page", ["/login/", "/admin/login/"])
def test_the_login_pages_offer_the_tenants_provider_when_opened_for_the_tenant(client, acme, acme_sso, page):
    plain = client.get(page).content.decode()
    assert "Sign in with" not in plain  # the page never lists the installation's tenants

    html = client.get(page + f"?tenant={TENANT}&next=/profile/").content.decode()

    assert "Sign in with Acme IdP" in html and f'href="{START}?next=%2Fprofile%2F"' in html
