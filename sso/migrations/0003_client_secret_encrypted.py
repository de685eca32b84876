"""Tenants' client secrets are stored encrypted (``core.secrets``): the column becomes text (a
ciphertext is longer than its secret) and each stored secret not yet encrypted is encrypted with
the first key of ``KB_SECRET_KEYS``. Reversed, they are decrypted back (a secret no key decrypts
stops the reversal).

The values are read and written with SQL, not through the field, which would decrypt what it
reads and encrypt what it writes.
"""

from django.db import migrations

import core.secrets


def _rewrite(apps, schema_editor, *, encrypted: bool, change) -> None:
    table = schema_editor.quote_name(apps.get_model("sso", "TenantSso")._meta.db_table)
    condition = "LIKE" if encrypted else "NOT LIKE"
    with schema_editor.connection.cursor() as cursor:
        cursor.execute(
            f"SELECT id, client_secret FROM {table} WHERE client_secret <> '' AND client_secret {condition} %s",
            [core.secrets.PREFIX + "%"],
        )
        for pk, stored in cursor.fetchall():
            cursor.execute(f"UPDATE {table} SET client_secret = %s WHERE id = %s", [change(stored), pk])


def client_secrets_encrypt(apps, schema_editor):
    _rewrite(apps, schema_editor, encrypted=False, change=core.secrets.secret_encrypt)


def client_secrets_decrypt(apps, schema_editor):
    _rewrite(apps, schema_editor, encrypted=True, change=core.secrets.secret_decrypt)


class Migration(migrations.Migration):
    dependencies = [
        ("sso", "0002_identity_tenant_and_other_tenants_members"),
    ]

    operations = [
        migrations.AlterField(
            model_name="tenantsso",
            name="client_secret",
            field=core.secrets.EncryptedTextField(blank=True),
        ),
        migrations.RunPython(client_secrets_encrypt, client_secrets_decrypt),
    ]
