"""A tenant's client secret is stored encrypted (``core.secrets``): sign-in still gets the secret,
the database holds only ciphertext, and the migration that introduced the encryption encrypts
the secrets stored before it and leaves encrypted ones alone."""

import importlib

import pytest
from cryptography.fernet import Fernet
from django.apps import apps
from django.db import connection

from core.secrets import PREFIX, secret_decrypt, secret_encrypt
from sso.models import TenantSso
from sso.providers import ProviderUnavailable, oauth_client, tenant_provider
from sso.services import tenant_sso_save
from tests.factories import TenantFactory

SECRET = "the-client-secret-" + "e" * 20
KEY = Fernet.generate_key().decode()
migration = importlib.import_module("sso.migrations.0003_client_secret_encrypted")


def stored(sso: TenantSso) -> str:
    with connection.cursor() as cursor:
        cursor.execute("SELECT client_secret FROM sso_tenantsso WHERE id = %s", [sso.pk])
        return cursor.fetchone()[0]


def store(sso: TenantSso, value: str) -> None:
    with connection.cursor() as cursor:
        cursor.execute("UPDATE sso_tenantsso SET client_secret = %s WHERE id = %s", [value, sso.pk])


def sso_of(slug: str) -> TenantSso:
    return tenant_sso_save(
        tenant=TenantFactory(slug=slug),
        values={"issuer": f"https://login.{slug}.example", "client_id": "kb"},
        client_secret=SECRET,
    )


def test_a_tenants_client_secret_is_stored_encrypted_and_sign_in_gets_the_secret(db, settings):
    settings.KB_SECRET_KEYS = [KEY]

    sso = sso_of("acme")

    assert stored(sso).startswith(PREFIX) and SECRET not in stored(sso)
    provider = tenant_provider(slug="acme")
    assert provider.client_secret == SECRET and SECRET not in repr(provider)


def test_sign_in_is_unavailable_when_no_key_decrypts_the_client_secret(db, settings):
    settings.KB_SECRET_KEYS = [KEY]
    sso = sso_of("acme")
    settings.KB_SECRET_KEYS = [Fernet.generate_key().decode()]  # the key that encrypted it dropped

    provider = tenant_provider(slug="acme")

    assert provider.client_secret == stored(sso)  # still the ciphertext, never sent to the provider
    with pytest.raises(ProviderUnavailable, match="cannot be decrypted with any key of KB_SECRET_KEYS"):
        oauth_client(provider)


def test_the_migration_encrypts_plain_client_secrets_and_leaves_encrypted_ones(db, settings):
    settings.KB_SECRET_KEYS = [KEY]
    plain, encrypted, empty = sso_of("acme"), sso_of("bolt"), TenantSso.objects.create(tenant=TenantFactory())
    store(plain, SECRET)
    already = secret_encrypt("bolt-secret")
    store(encrypted, already)

    with connection.schema_editor() as editor:
        migration.client_secrets_encrypt(apps, editor)

    assert stored(plain).startswith(PREFIX) and secret_decrypt(stored(plain)) == SECRET
    assert stored(encrypted) == already
    assert stored(empty) == ""

    with connection.schema_editor() as editor:
        migration.client_secrets_decrypt(apps, editor)

    assert stored(plain) == SECRET and stored(encrypted) == "bolt-secret" and stored(empty) == ""
