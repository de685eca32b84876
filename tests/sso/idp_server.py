"""The real OpenID Connect provider on loopback that the single sign-on tests sign in at
(django-oauth-toolkit in a Django project of its own, ``tests/sso/provider/``).

A plugin of the root ``tests/conftest.py`` (``pytest_plugins``), so that its session fixture is
one definition: the provider starts once per test run (once per pytest-xdist worker), whichever
folder's tests ask for it first.
"""

import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest
import requests

from tests.conftest import free_port

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
