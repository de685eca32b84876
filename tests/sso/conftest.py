"""A real OpenID Connect provider on loopback for the single sign-on tests (django-oauth-toolkit in
a Django project of its own, ``tests/sso/provider/``, started once per test run), and a helper
that signs in at it the way a browser would."""

import html
import json
import os
import re
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

import pytest
import requests

from sso.providers import metadata_forget
from tests.conftest import free_port
from tests.factories import TenantFactory

ROOT = Path(__file__).resolve().parents[2]
CLIENT_ID = "kb-test"
CLIENT_SECRET = "kb-test-secret-" + "s" * 24
TENANT = "acme"

USERS = {
    "ann": {
        "password": "ann-at-the-idp",
        "claims": {
            "email": "ann@acme.example",
            "email_verified": True,
            "preferred_username": "ann",
            "given_name": "Ann",
            "family_name": "Lee",
            "kb_roles": ["kb-editors"],
            "groups": ["finance", "not-a-group-here"],
        },
    },
    "zed": {
        "password": "zed-at-the-idp",
        "claims": {"email": "zed@elsewhere.example", "email_verified": True, "preferred_username": "zed"},
    },
}


@dataclass
class Idp:
    """The running provider: its base URL, issuer, and the users file it reads at every request."""

    url: str
    issuer: str
    users_file: Path

    def users_set(self, users: dict) -> None:
        self.users_file.write_text(json.dumps(users))


@pytest.fixture(scope="session")
def idp_server(tmp_path_factory):
    data = tmp_path_factory.mktemp("idp")
    users_file = data / "users.json"
    users_file.write_text(json.dumps(USERS))
    port = free_port()
    hosts = ("testserver", "127.0.0.1", "localhost")
    paths = ("/sso/callback/", f"/sso/tenant/{TENANT}/callback/")
    client = {
        "client_id": CLIENT_ID,
        "client_secret": CLIENT_SECRET,
        "redirect_uris": [f"http://{host}{path}" for host in hosts for path in paths],
    }
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "tests.sso.provider.settings",
        "KB_TEST_IDP_DIR": str(data),
        "KB_TEST_IDP_USERS": str(users_file),
        "KB_TEST_IDP_CLIENT": json.dumps(client),
    }
    log = open(data / "idp.log", "w")  # noqa: SIM115 (open while the provider runs)
    process = subprocess.Popen(
        [sys.executable, "-m", "tests.sso.provider.serve", str(port)], cwd=ROOT, env=env, stdout=log, stderr=log
    )
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while True:
        try:
            if requests.get(f"{base}/o/.well-known/openid-configuration", timeout=2).ok:
                break
        except requests.ConnectionError:
            pass
        if process.poll() is not None or time.monotonic() > deadline:
            process.kill()
            pytest.fail("the test identity provider did not start:\n" + (data / "idp.log").read_text()[-3000:])
        time.sleep(0.2)
    issuer = requests.get(f"{base}/o/.well-known/openid-configuration", timeout=5).json()["issuer"]
    yield Idp(url=base, issuer=issuer, users_file=users_file)
    process.terminate()
    try:
        process.wait(10)
    except subprocess.TimeoutExpired:
        process.kill()
    log.close()


@pytest.fixture
def idp(idp_server, settings):
    """The provider, with its users as in ``USERS`` again after the test; outbound fetches to
    loopback allowed (the operator's allowance the tests need for a tenant's provider)."""
    settings.KB_FETCH_ALLOWED_NETWORKS = ["127.0.0.1/32"]
    settings.KB_OIDC_ISSUER = ""
    metadata_forget()
    yield idp_server
    idp_server.users_set(USERS)
    metadata_forget()


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
