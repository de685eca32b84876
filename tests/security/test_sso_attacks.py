"""Single sign-on attacks across tenants, against a real OpenID Connect provider on loopback
(``tests/sso/conftest.py``) or, for the fetch limits, a small web site on 127.0.0.1.

Each attack is tried with its guard on, and refused; and with that guard switched off, when it
gets through, which shows the test can fail:

- a tenant's provider signs in an account that also belongs to another tenant (which then acts
  there with ``X-Tenant``): refused unless the operator allowed it for that provider, and a
  sign-in through a tenant's provider acts in that tenant only;
- a link made through one tenant's provider is used by another tenant's provider of the same issuer;
- a tenant's provider links (by email) or signs in a staff account or a superuser;
- anonymous requests flood the audit log with refused sign-ins: throttled (429) and recorded once
  per window;
- a provider's discovery document or JWKS is a gzip bomb: refused after 1 MB decompressed, and a
  failed discovery is not fetched again for a while.
"""

from __future__ import annotations

import json
import time
import tracemalloc
import zlib

import pytest
from django.contrib.auth import get_user_model
from django.core.cache import caches

from core import memberships
from core.models import AuditEvent, Membership
from core.rls import rls_bypass
from sso import fetches as sso_fetches
from sso import services as sso_services
from sso.models import Identity
from sso.providers import metadata_forget, metadata_get, tenant_provider
from sso.services import signin_complete, tenant_sso_save
from tests.factories import MembershipFactory, TenantFactory, UserFactory
from tests.knowledge.web_site import Response, WebSite
from tests.sso.conftest import TENANT, USERS, local, provider_sign_in

User = get_user_model()
START = f"/sso/tenant/{TENANT}/login/"
CALLBACK = f"/sso/tenant/{TENANT}/callback/"
DISCOVERY = "/.well-known/openid-configuration"
MB = 1024 * 1024


@pytest.fixture(autouse=True)
def _nothing_kept():
    """No refusal counted and no discovery document kept from another test."""
    caches["throttles"].clear()
    metadata_forget()
    yield
    caches["throttles"].clear()
    metadata_forget()


@pytest.fixture
def bolt(db):
    return TenantFactory(slug="bolt", name="Bolt")


def sign_in(client, username: str = "ann"):
    """Start at acme's provider, sign in there as ``username``, and return our callback's response."""
    started = client.get(START)
    assert started.status_code == 302, started.content[:500]
    back = provider_sign_in(started["Location"], username, USERS[username]["password"])
    return client.get(local(back))


def signed_in_user(client):
    response = client.get("/api/v1/profile/")
    return response.wsgi_request.user if response.wsgi_request.user.is_authenticated else None


def refusals() -> list[AuditEvent]:
    with rls_bypass():
        return list(AuditEvent.objects.filter(action="signin.failed").order_by("id"))


# ---- 1. a tenant's provider signs in to another tenant --------------------------------------------


@pytest.mark.parametrize("guard", ["on", "off"])
def test_a_tenants_provider_never_signs_in_a_linked_account_that_is_a_member_of_another_tenant_too(
    client, acme, acme_sso, bolt, monkeypatch, guard
):
    ann = UserFactory(username="ann", email="ann@acme.example")
    MembershipFactory(user=ann, tenant=acme, role="member")
    assert sign_in(client).status_code == 302  # linked while ann belonged to acme alone
    client.logout()
    MembershipFactory(user=ann, tenant=bolt, role="admin")  # later, ann joins bolt as its admin
    if guard == "off":
        monkeypatch.setattr(sso_services, "_tenant_provider_may_sign_in", lambda provider, account, email="": None)

    response = sign_in(client)

    if guard == "on":
        assert response.status_code == 403 and "belongs to other teams" in response.content.decode()
        assert signed_in_user(client) is None
        assert client.get("/api/v1/audit/", HTTP_X_TENANT="bolt").status_code in (401, 403)
        assert refusals()[-1].changes["reason"] == "member_elsewhere"
    else:
        assert response.status_code == 302 and signed_in_user(client) == ann


@pytest.mark.parametrize("guard", ["on", "off"])
def test_a_sign_in_through_a_tenants_provider_acts_in_that_tenant_only(
    client, acme, acme_sso, bolt, monkeypatch, guard
):
    tenant_sso_save(tenant=acme, values={"allow_other_tenants_members": True})  # the operator allowed it
    ann = UserFactory(username="ann", email="ann@acme.example")
    MembershipFactory(user=ann, tenant=acme, role="member")
    MembershipFactory(user=ann, tenant=bolt, role="admin")
    if guard == "off":
        monkeypatch.setattr(memberships, "membership_bound_slug", lambda request: None)

    assert sign_in(client).status_code == 302
    own = client.get("/api/v1/sources/", HTTP_X_TENANT="acme")
    other = client.get("/api/v1/audit/", HTTP_X_TENANT="bolt")
    switched = client.post("/tenant/", {"tenant": "bolt", "next": "/"})

    assert own.status_code == 200
    if guard == "on":
        assert other.status_code == 403
        assert "single sign-on of tenant 'acme'" in other.json()["error"]["message"]
        assert switched.status_code == 403
        assert client.get("/api/v1/sources/").wsgi_request.session["kb_tenant"] == "acme"
        # A sign-in with the password lifts the hold.
        client.force_login(ann, backend="django.contrib.auth.backends.ModelBackend")
        assert client.get("/api/v1/audit/", HTTP_X_TENANT="bolt").status_code == 200
    else:
        assert other.status_code == 200 and switched.status_code == 302


@pytest.mark.parametrize("guard", ["on", "off"])
def test_a_link_made_through_one_tenants_provider_never_signs_in_through_another_tenants(
    acme, bolt, monkeypatch, guard
):
    issuer = "https://login.shared.example"  # one provider, two tenants' clients
    tenant_sso_save(tenant=acme, values={"issuer": issuer, "client_id": "acme"}, client_secret="s" * 20)
    tenant_sso_save(
        tenant=bolt,
        values={"issuer": issuer, "client_id": "bolt", "create_memberships": True, "allow_other_tenants_members": True},
        client_secret="s" * 20,
    )
    ann = UserFactory(username="ann", email="ann@acme.example")
    MembershipFactory(user=ann, tenant=acme)
    claims = {"sub": "ann-at-the-idp", "email": "ann@acme.example", "email_verified": True}
    signin_complete(provider=tenant_provider(slug="acme"), claims=claims)
    if guard == "off":

        def any_tenants_link(provider, subject):
            with rls_bypass():
                return Identity.objects.select_related("user").filter(issuer=provider.issuer, subject=subject).first()

        monkeypatch.setattr(sso_services, "_identity_find", any_tenants_link)

    # bolt's client at the same provider presents the same subject, without the email.
    user, tenant = signin_complete(provider=tenant_provider(slug="bolt"), claims={"sub": "ann-at-the-idp"})

    assert tenant == bolt
    if guard == "on":
        assert user != ann and not Membership.objects.filter(user=ann, tenant=bolt).exists()
        assert set(Identity.objects.filter(subject="ann-at-the-idp").values_list("tenant__slug", "user")) == {
            ("acme", ann.pk),
            ("bolt", user.pk),
        }
    else:
        assert user == ann and Membership.objects.filter(user=ann, tenant=bolt).exists()


# ---- 2. a tenant's provider takes over a staff account --------------------------------------------


@pytest.mark.parametrize("kind", ["is_staff", "is_superuser"])
@pytest.mark.parametrize("guard", ["on", "off"])
def test_a_tenants_provider_never_links_a_staff_account_by_its_email(client, acme, acme_sso, monkeypatch, kind, guard):
    tenant_sso_save(tenant=acme, values={"create_memberships": True})
    operator = UserFactory(username="ops", email="ann@acme.example", **{kind: True})  # of no tenant
    if guard == "off":
        monkeypatch.setattr(sso_services, "_tenant_provider_may_sign_in", lambda provider, account, email="": None)

    response = sign_in(client)  # the provider's ann asserts the staff account's email

    if guard == "on":
        assert response.status_code == 403 and "staff account" in response.content.decode()
        assert signed_in_user(client) is None
        assert not Identity.objects.exists() and not Membership.objects.filter(user=operator).exists()
        assert refusals()[-1].changes["reason"] == "staff_account"
    else:
        assert response.status_code == 302 and signed_in_user(client) == operator
        assert Membership.objects.filter(user=operator, tenant=acme).exists()


@pytest.mark.parametrize("guard", ["on", "off"])
def test_a_linked_account_made_staff_later_no_longer_signs_in_through_a_tenants_provider(
    client, acme, acme_sso, monkeypatch, guard
):
    ann = UserFactory(username="ann", email="ann@acme.example")
    MembershipFactory(user=ann, tenant=acme)
    assert sign_in(client).status_code == 302
    client.logout()
    User.objects.filter(pk=ann.pk).update(is_staff=True)
    if guard == "off":
        monkeypatch.setattr(sso_services, "_tenant_provider_may_sign_in", lambda provider, account, email="": None)

    response = sign_in(client)

    if guard == "on":
        assert response.status_code == 403 and signed_in_user(client) is None
        assert refusals()[-1].changes["reason"] == "staff_account"
    else:
        assert response.status_code == 302 and signed_in_user(client) == ann


# ---- 3. the audit log flooded with refusals -------------------------------------------------------


@pytest.mark.parametrize("guard", ["on", "off"])
def test_a_hundred_anonymous_refused_sign_ins_are_throttled_and_recorded_once(
    client, acme, acme_sso, settings, monkeypatch, guard
):
    settings.KB_SSO_REFUSAL_LIMIT, settings.KB_SSO_REFUSAL_WINDOW_S = 10, 300
    if guard == "off":
        monkeypatch.setattr(sso_services, "_window_count_up", lambda key: 1)

    responses = [client.get(CALLBACK + f"?state=forged-{n}&code=x") for n in range(100)]

    statuses = [r.status_code for r in responses]
    if guard == "on":
        assert statuses == [400] * 10 + [429] * 90
        throttled = responses[-1]
        assert "Too many sign-ins through Acme IdP" in throttled.content.decode()
        assert throttled["Retry-After"] == "300"
        assert client.get(START).status_code == 429  # the other endpoint, no fetch
        assert [e.changes["reason"] for e in refusals()] == ["bad_state", "throttled"]
        assert all(e.tenant_id == acme.pk and e.client_ip == "127.0.0.1" for e in refusals())
        # Another address is not held back, and is recorded on its own.
        assert client.get(CALLBACK + "?state=forged&code=x", REMOTE_ADDR="198.51.100.7").status_code == 400
        assert [e.client_ip for e in refusals()][-1] == "198.51.100.7"
    else:
        assert statuses == [400] * 100 and len(refusals()) == 100


def test_the_throttle_ends_with_its_window_and_the_next_refusal_is_recorded_again(client, acme, acme_sso, settings):
    settings.KB_SSO_REFUSAL_LIMIT, settings.KB_SSO_REFUSAL_WINDOW_S = 2, 1

    statuses = [client.get(CALLBACK + "?state=forged&code=x").status_code for _ in range(3)]
    time.sleep(1.2)
    after = client.get(CALLBACK + "?state=forged&code=x").status_code

    assert statuses == [400, 400, 429] and after == 400
    assert [e.changes["reason"] for e in refusals()] == ["bad_state", "throttled", "bad_state"]


# ---- 4. the discovery document and keys as gzip bombs ---------------------------------------------


def gzip_bomb(megabytes: int = 64) -> bytes:
    """A JSON object padded to ``megabytes`` MB, gzip-compressed to about 1/1000 of that."""
    packer = zlib.compressobj(9, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    parts = [packer.compress(b'{"issuer": "x", "pad": "')]
    block = b"a" * MB
    parts += [packer.compress(block) for _ in range(megabytes)]
    parts += [packer.compress(b'"}'), packer.flush()]
    return b"".join(parts)


GZIP_JSON = {"Content-Type": "application/json", "Content-Encoding": "gzip"}


@pytest.fixture(scope="module")
def bomb() -> bytes:
    return gzip_bomb()


@pytest.fixture
def site(settings):
    """A web site on 127.0.0.1 that the tests make a provider of; loopback opened as the operator would."""
    settings.KB_FETCH_ALLOWED_NETWORKS = ["127.0.0.1/32"]
    with WebSite() as served:
        yield served


def provider_at(site, tenant) -> str:
    issuer = site.url("")
    tenant_sso_save(tenant=tenant, values={"issuer": issuer, "client_id": "kb"}, client_secret="s" * 20)
    return issuer


def discovery(issuer: str) -> dict:
    return {
        "issuer": issuer,
        "authorization_endpoint": issuer + "/authorize",
        "token_endpoint": issuer + "/token",
        "jwks_uri": issuer + "/jwks",
    }


def started_measured(client, site) -> tuple[object, float]:
    """GET the tenant's sign-in start; the response and the peak of memory allocated meanwhile (MB).
    One start before, refused for a provider with no discovery document yet, loads what the first
    request of a process loads (modules, templates), so the peak is the fetch's alone."""
    served, site.pages[DISCOVERY] = site.pages[DISCOVERY], Response(404, "")
    assert client.get(START).status_code == 502
    site.pages[DISCOVERY] = served
    metadata_forget()
    caches["throttles"].clear()
    tracemalloc.start()
    try:
        response = client.get(START)
        peak = tracemalloc.get_traced_memory()[1] / MB
    finally:
        tracemalloc.stop()
    return response, peak


@pytest.mark.parametrize("part", ["discovery document", "JWKS"])
@pytest.mark.parametrize("guard", ["on", "off"])
def test_a_gzip_bomb_as_the_providers_discovery_document_or_keys_is_refused_after_one_mb(
    client, acme, site, bomb, monkeypatch, part, guard
):
    issuer = provider_at(site, acme)
    if part == "discovery document":
        site.pages[DISCOVERY] = Response(200, bomb, GZIP_JSON)
    else:
        site.pages[DISCOVERY] = Response(200, json.dumps(discovery(issuer)), {"Content-Type": "application/json"})
        site.pages["/jwks"] = Response(200, bomb, GZIP_JSON)
    if guard == "off":
        monkeypatch.setattr(sso_fetches, "_decoded_cap", lambda adapter_class, budget: adapter_class)

    response, peak_mb = started_measured(client, site)

    assert len(bomb) < 100_000  # about 65 KB on the wire
    if guard == "on":
        assert response.status_code == 502 and "cannot be reached" in response.content.decode()
        assert refusals()[-1].changes["reason"] == "provider_unavailable"
        assert peak_mb < 8, f"{peak_mb:.1f} MB"
    else:
        assert peak_mb > 64, f"{peak_mb:.1f} MB"  # the whole 64 MB inflated in the web process


@pytest.mark.parametrize("guard", ["on", "off"])
def test_a_discovery_that_failed_is_not_fetched_again_for_a_while(client, acme, site, bomb, settings, guard):
    provider_at(site, acme)
    site.pages[DISCOVERY] = Response(200, bomb, GZIP_JSON)
    settings.KB_SSO_DISCOVERY_FAILURE_TTL_S = 60 if guard == "on" else 0

    statuses = [client.get(START).status_code for _ in range(5)]

    assert statuses == [502] * 5
    assert site.hits[DISCOVERY] == (1 if guard == "on" else 5)


def test_a_small_compressed_discovery_document_and_keys_are_still_read(acme, site):
    issuer = provider_at(site, acme)
    keys = {"keys": [{"kty": "RSA", "kid": "k1", "n": "AQAB" * 64, "e": "AQAB"}]}
    gzip = zlib.compressobj(6, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    site.pages[DISCOVERY] = Response(
        200, gzip.compress(json.dumps(discovery(issuer)).encode()) + gzip.flush(), GZIP_JSON
    )
    site.pages["/jwks"] = Response(
        200,
        zlib.compress(json.dumps(keys).encode()),
        {"Content-Type": "application/json", "Content-Encoding": "deflate"},
    )

    metadata = metadata_get(tenant_provider(slug="acme"))

    assert metadata["token_endpoint"] == issuer + "/token" and metadata["jwks"] == keys
