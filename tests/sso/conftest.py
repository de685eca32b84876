"""The single sign-on tests' fixtures: the real OpenID Connect provider on loopback
(``tests/sso/idp_server.py``, started once per test run), tenant ``acme`` signing in through it,
and a helper that signs in at it the way a browser would."""

import html
import re
from urllib.parse import urlsplit

import pytest
import requests
from django.core.cache import caches

from sso.providers import metadata_forget
from tests.factories import TenantFactory
from tests.sso.idp_server import CLIENT_ID, CLIENT_SECRET, TENANT, USERS, Idp  # noqa: F401 - used by the tests


@pytest.fixture
def idp(idp_server, settings):
    """The provider, with its users as in ``USERS`` again after the test; outbound fetches to
    loopback allowed (the operator's allowance the tests need for a tenant's provider); no
    refusal counted yet (the test client's address is always 127.0.0.1)."""
    settings.KB_FETCH_ALLOWED_NETWORKS = ["127.0.0.1/32"]
    settings.KB_OIDC_ISSUER = ""
    metadata_forget()
    caches["throttles"].clear()
    yield idp_server
    idp_server.users_set(USERS)
    metadata_forget()
    caches["throttles"].clear()


@pytest.fixture
def acme(db):
    return TenantFactory(slug=TENANT, name="Acme")


@pytest.fixture
def acme_sso(acme, idp):
    """Acme signs in through the test provider: roles from ``kb_roles``, groups from ``groups``;
    no memberships made at sign-in."""
    from sso.services import tenant_sso_save

    return tenant_sso_save(
        tenant=acme,
        values={
            "name": "Acme IdP",
            "issuer": idp.issuer,
            "client_id": CLIENT_ID,
            "role_claim": "kb_roles",
            "role_values": {"kb-editors": "editor", "kb-admins": "admin"},
            "groups_claim": "groups",
        },
        client_secret=CLIENT_SECRET,
    )


def _form_field(page: str, name: str) -> str:
    match = re.search(rf'name="{name}" value="([^"]*)"', page)
    return html.unescape(match.group(1)) if match else ""


def provider_sign_in(authorize_url: str, username: str, password: str) -> str:
    """Sign in at the provider as a browser would (its login form, then the authorization
    endpoint) and return the URL the provider redirects back to (the callback, with code and state)."""
    browser = requests.Session()
    page = browser.get(authorize_url, timeout=10)
    assert page.ok and 'name="password"' in page.text, page.text[:500]
    form = {
        "username": username,
        "password": password,
        "csrfmiddlewaretoken": _form_field(page.text, "csrfmiddlewaretoken"),
        "next": _form_field(page.text, "next"),
    }
    response = browser.post(page.url, data=form, allow_redirects=False, timeout=10)
    for _ in range(5):
        assert response.status_code in (301, 302), response.text[:500]
        location = response.headers["Location"]
        if "/sso/" in urlsplit(location).path:
            return location
        response = browser.get(requests.compat.urljoin(response.url, location), allow_redirects=False, timeout=10)
    raise AssertionError("the provider never redirected back")


def local(url: str) -> str:
    """``url``'s path and query, for the Django test client."""
    parts = urlsplit(url)
    return parts.path + ("?" + parts.query if parts.query else "")
