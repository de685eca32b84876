"""Only the operator sets single sign-on: the superuser admin with a write-only secret, and
``manage.py sso``; a bad installation-wide setting stops the server from starting."""

import io
import os
import subprocess
import sys
from pathlib import Path

import pytest
from django.core.exceptions import ImproperlyConfigured
from django.core.management import CommandError, call_command

from core.models import AuditEvent
from core.rls import rls_bypass
from sso.models import TenantSso
from sso.providers import installation_settings_check
from tests.factories import MembershipFactory, TenantFactory, UserFactory
from tests.sso.conftest import CLIENT_ID, CLIENT_SECRET

ROOT = Path(__file__).resolve().parents[2]
SECRET = "the-client-secret-" + "q" * 20


@pytest.fixture
def superuser(db):
    return UserFactory(username="root", is_staff=True, is_superuser=True)


def test_the_superuser_admin_sets_a_tenants_provider_and_never_shows_the_secret(client, superuser):
    acme = TenantFactory(slug="acme")
    client.force_login(superuser)
    form = {
        "tenant": acme.pk,
        "enabled": "on",
        "name": "Acme IdP",
        "issuer": "https://login.acme.example/realms/kb/",
        "client_id": "kb",
        "new_client_secret": SECRET,
        "scopes": "openid email",
        "role_claim": "realm_access.roles",
        "role_values": '{"kb-admins": "admin"}',
        "default_role": "viewer",
        "groups_claim": "groups",
    }

    response = client.post("/admin/sso/tenantsso/add/", form)

    assert response.status_code == 302, response.content.decode()[-2000:]
    sso = TenantSso.objects.get(tenant=acme)
    assert sso.issuer == "https://login.acme.example/realms/kb" and sso.client_secret == SECRET
    page = client.get(f"/admin/sso/tenantsso/{sso.pk}/change/").content.decode()
    assert SECRET not in page and 'name="new_client_secret"' in page
    # Saved again with the secret's field left empty: the stored secret stays.
    client.post(f"/admin/sso/tenantsso/{sso.pk}/change/", {**form, "new_client_secret": "", "name": "Acme"})
    sso.refresh_from_db()
    assert sso.client_secret == SECRET and sso.name == "Acme"
    with rls_bypass():
        created, changed = AuditEvent.objects.filter(action__startswith="tenant_sso.").order_by("id")
    assert created.action == "tenant_sso.created" and created.changes["client_secret"] == "changed"
    assert SECRET not in str(created.changes) and changed.changes == {"name": ["Acme IdP", "Acme"]}


def test_the_admin_refuses_an_issuer_that_is_not_https(client, superuser):
    acme = TenantFactory(slug="acme")
    client.force_login(superuser)
    form = {
        "tenant": acme.pk,
        "enabled": "on",
        "issuer": "http://10.0.0.5/realms/kb",
        "client_id": "kb",
        "new_client_secret": SECRET,
        "scopes": "openid",
        "role_values": "{}",
        "default_role": "member",
    }

    response = client.post("/admin/sso/tenantsso/add/", form)

    assert response.status_code == 200 and "must use https://" in response.content.decode()
    assert not TenantSso.objects.exists()


def test_a_tenant_admin_cannot_see_or_set_single_sign_on_in_the_admin(client, db):
    acme = TenantFactory(slug="acme")
    admin = MembershipFactory(tenant=acme, role="admin").user
    admin.is_staff = True
    admin.save()
    from django.contrib.auth.models import Permission

    admin.user_permissions.set(Permission.objects.filter(content_type__app_label="sso"))
    client.force_login(admin)

    assert client.get("/admin/sso/tenantsso/").status_code == 403
    assert client.get("/admin/sso/tenantsso/add/").status_code == 403
    assert "tenantsso" not in client.get("/admin/").content.decode()


def test_the_sso_command_sets_a_tenants_provider_from_the_environment_and_never_prints_the_secret(db, monkeypatch):
    TenantFactory(slug="acme")
    monkeypatch.setenv("ACME_OIDC_SECRET", SECRET)
    out = io.StringIO()

    call_command(
        "sso",
        "acme",
        "--issuer",
        "https://login.acme.example",
        "--client-id",
        "kb",
        "--client-secret-env",
        "ACME_OIDC_SECRET",
        "--role-claim",
        "roles",
        "--role",
        "kb-admins=admin",
        "--role",
        "kb=member",
        "--create-memberships",
        "on",
        "--json",
        stdout=out,
    )

    assert SECRET not in out.getvalue() and '"client_secret": "stored"' in out.getvalue()
    sso = TenantSso.objects.get(tenant__slug="acme")
    assert sso.role_values == {"kb-admins": "admin", "kb": "member"} and sso.create_memberships
    with rls_bypass():
        event = AuditEvent.objects.get(action="tenant_sso.created")
    assert event.actor_label == "operator (CLI)"


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (["--issuer", "http://login.acme.example", "--client-id", "kb"], "must use https://"),
        (["--issuer", "https://login.acme.example"], "needs a client id and a client secret"),
        (["--installation", "--role", "x=superhero"], "role_values must map claim values to roles"),
        (["--installation", "--scopes", "email"], "must include openid"),
    ],
)
def test_the_sso_command_refuses_a_setting_that_cannot_work(db, arguments, message):
    TenantFactory(slug="acme")

    with pytest.raises(CommandError, match=message):
        call_command("sso", "acme", *arguments, stdout=io.StringIO())

    assert not TenantSso.objects.exists()


def test_the_sso_command_checks_a_provider_by_fetching_its_discovery_document(idp, db, capsys, monkeypatch):
    acme = TenantFactory(slug="acme")
    monkeypatch.setenv("KB_TEST_SECRET", CLIENT_SECRET)

    call_command(
        "sso",
        "acme",
        "--issuer",
        idp.issuer,
        "--client-id",
        CLIENT_ID,
        "--client-secret-env",
        "KB_TEST_SECRET",
        "--check",
        stdout=io.StringIO(),
    )

    assert f"issuer {idp.issuer}" in capsys.readouterr().err
    assert TenantSso.objects.get(tenant=acme).issuer == idp.issuer


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"KB_OIDC_ISSUER": "https://login.example.com"}, "KB_OIDC_CLIENT_ID and KB_OIDC_CLIENT_SECRET must be"),
        ({"KB_OIDC_CLIENT_ID": "kb"}, "KB_OIDC_ISSUER is not"),
        (
            {"KB_OIDC_ISSUER": "http://login.example.com", "KB_OIDC_CLIENT_ID": "kb", "KB_OIDC_CLIENT_SECRET": "s"},
            "must use https://",
        ),
        (
            {
                "KB_OIDC_ISSUER": "https://l.example",
                "KB_OIDC_CLIENT_ID": "k",
                "KB_OIDC_CLIENT_SECRET": "s",
                "KB_OIDC_SCOPES": "email",
            },
            "must include openid",
        ),
    ],
)
def test_a_half_set_or_unusable_installation_provider_is_refused_by_name(settings, values, message):
    settings.KB_OIDC_ISSUER = settings.KB_OIDC_CLIENT_ID = settings.KB_OIDC_CLIENT_SECRET = ""
    settings.KB_OIDC_SCOPES = "openid"
    for name, value in values.items():
        setattr(settings, name, value)

    with pytest.raises(ImproperlyConfigured, match=message):
        installation_settings_check()


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"KB_OIDC_ISSUER": "ftp://login.example.com"}, "KB_OIDC_ISSUER='ftp://login.example.com' must be a URL"),
        ({"KB_OIDC_ISSUER": "https://login.example.com"}, "KB_OIDC_CLIENT_ID and KB_OIDC_CLIENT_SECRET must be"),
    ],
)
def test_the_server_does_not_start_with_a_bad_installation_provider(tmp_path, values, message):
    env = {
        **os.environ,
        **values,
        "KB_DATA_DIR": str(tmp_path),
        "DJANGO_SETTINGS_MODULE": "config.settings",
        "DATABASE_URL": "postgres://nobody@127.0.0.1:1/none",  # never connected to
    }
    command = [sys.executable, "-c", "import django; django.setup()"]
    run = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert run.returncode != 0 and message in run.stderr
