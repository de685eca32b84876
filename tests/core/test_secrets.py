"""Secrets stored encrypted at rest (``core.secrets``): the database holds ciphertext, the models
read plain text, ``manage.py rotatekeys`` moves every secret to the first key of
``KB_SECRET_KEYS``, and bad or missing keys are reported. The tenants' SSO client secrets are
the stored secrets used here."""

import io

import pytest
from cryptography.fernet import Fernet
from django.core.exceptions import ImproperlyConfigured
from django.core.management import CommandError, call_command
from django.core.management.base import SystemCheckError
from django.db import connection

from core.secrets import PREFIX, secret_encrypt, secret_readable
from sso.models import TenantSso
from tests.factories import TenantFactory

SECRET = "the-client-secret-" + "s" * 20
OLD_KEY = Fernet.generate_key().decode()
NEW_KEY = Fernet.generate_key().decode()


def stored(sso: TenantSso) -> str:
    """The column as the database holds it."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT client_secret FROM sso_tenantsso WHERE id = %s", [sso.pk])
        return cursor.fetchone()[0]


def sso_with_secret(slug: str = "acme", secret: str = SECRET) -> TenantSso:
    tenant = TenantFactory(slug=slug)
    return TenantSso.objects.create(
        tenant=tenant, issuer=f"https://login.{slug}.example", client_id="kb", client_secret=secret
    )


def rotatekeys() -> str:
    out = io.StringIO()
    call_command("rotatekeys", stdout=out)
    return out.getvalue()


def test_the_database_holds_the_ciphertext_and_the_model_reads_the_secret(db, settings):
    settings.KB_SECRET_KEYS = [OLD_KEY]

    sso = sso_with_secret()

    column = stored(sso)
    assert column.startswith(PREFIX) and SECRET not in column
    assert Fernet(OLD_KEY.encode()).decrypt(column.removeprefix(PREFIX).encode()).decode() == SECRET
    assert TenantSso.objects.get(pk=sso.pk).client_secret == SECRET


def test_rotating_to_a_new_key_lets_the_old_key_be_dropped(db, settings):
    settings.KB_SECRET_KEYS = [OLD_KEY]
    sso = sso_with_secret()
    before = stored(sso)

    settings.KB_SECRET_KEYS = [NEW_KEY, OLD_KEY]
    out = rotatekeys()

    assert "sso.TenantSso.client_secret: 1 rewritten, 0 could not be decrypted" in out
    assert "put a new key first" in out
    after = stored(sso)
    assert after != before and SECRET not in after
    settings.KB_SECRET_KEYS = [NEW_KEY]
    assert TenantSso.objects.get(pk=sso.pk).client_secret == SECRET


def test_a_secret_under_a_dropped_key_is_reported_and_left_as_it_was(db, settings):
    settings.KB_SECRET_KEYS = [OLD_KEY]
    sso = sso_with_secret()
    before = stored(sso)
    settings.KB_SECRET_KEYS = [NEW_KEY]
    out = io.StringIO()

    with pytest.raises(CommandError, match="could not be decrypted with any key of KB_SECRET_KEYS"):
        call_command("rotatekeys", stdout=out)

    assert f"sso.TenantSso.client_secret: 0 rewritten, 1 could not be decrypted (primary keys {sso.pk})" in (
        out.getvalue()
    )
    assert stored(sso) == before
    unreadable = TenantSso.objects.get(pk=sso.pk)
    assert unreadable.client_secret == before and not secret_readable(unreadable.client_secret)
    # Saving the row (another field changed) keeps the stored value.
    unreadable.name = "Acme"
    unreadable.save()
    assert stored(sso) == before
    # The key put back (after the new one): the secret reads again, and rotation succeeds.
    settings.KB_SECRET_KEYS = [NEW_KEY, OLD_KEY]
    assert TenantSso.objects.get(pk=sso.pk).client_secret == SECRET
    assert "1 rewritten, 0 could not be decrypted" in rotatekeys()
    settings.KB_SECRET_KEYS = [NEW_KEY]
    assert TenantSso.objects.get(pk=sso.pk).client_secret == SECRET


def test_rotation_encrypts_a_secret_stored_before_encryption_and_leaves_empty_ones(db, settings):
    settings.KB_SECRET_KEYS = [NEW_KEY]
    plain = sso_with_secret("acme")
    empty = TenantSso.objects.create(tenant=TenantFactory(slug="bolt"))
    with connection.cursor() as cursor:
        cursor.execute("UPDATE sso_tenantsso SET client_secret = %s WHERE id = %s", [SECRET, plain.pk])

    out = rotatekeys()

    assert "sso.TenantSso.client_secret: 1 rewritten, 0 could not be decrypted" in out
    assert stored(plain).startswith(PREFIX) and TenantSso.objects.get(pk=plain.pk).client_secret == SECRET
    assert stored(empty) == ""


def test_secrets_encrypted_before_keys_were_set_stay_readable_and_rotate_to_the_new_key(db, settings):
    settings.KB_SECRET_KEYS = []  # the key derived from SECRET_KEY
    sso = sso_with_secret()

    settings.KB_SECRET_KEYS = [NEW_KEY]
    assert TenantSso.objects.get(pk=sso.pk).client_secret == SECRET
    rotatekeys()

    column = stored(sso)
    assert Fernet(NEW_KEY.encode()).decrypt(column.removeprefix(PREFIX).encode()).decode() == SECRET


def check_deploy_output() -> str:
    err = io.StringIO()
    call_command("check", "--deploy", "--tag", "security", stdout=io.StringIO(), stderr=err)
    return err.getvalue()


def test_check_deploy_warns_when_no_secret_keys_are_set(db, settings):
    settings.KB_SECRET_KEYS = []
    output = check_deploy_output()
    assert "core.W006" in output and "KB_SECRET_KEYS is empty" in output

    settings.KB_SECRET_KEYS = [NEW_KEY]
    assert "core.W006" not in check_deploy_output()


def test_a_malformed_key_is_a_clear_error_that_never_quotes_the_key(db, settings):
    settings.KB_SECRET_KEYS = [NEW_KEY, "not-a-fernet-key"]

    with pytest.raises(SystemCheckError) as checked:
        call_command("check", stdout=io.StringIO(), stderr=io.StringIO())
    with pytest.raises(ImproperlyConfigured) as used:
        secret_encrypt(SECRET)

    for message in (str(checked.value), str(used.value)):
        assert "KB_SECRET_KEYS key 2 of 2 is malformed" in message and "Fernet.generate_key()" in message
        assert "not-a-fernet-key" not in message and NEW_KEY not in message
    assert "core.E001" in str(checked.value)
