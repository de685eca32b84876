"""Per-tenant quotas (``core.TenantQuota``) and the append-only audit log (``core.AuditEvent``).

Both tables carry ``tenant_id`` and get the tenant policy of row-level security
(``kb_rls_enable()``, knowledge migration 0011). The audit log is append-only in the database
itself: a trigger refuses every UPDATE and DELETE of its rows, whoever runs them, and the app
role ``kb_app`` keeps only SELECT and INSERT on it. Its tenant and actor columns have no
foreign-key constraint, so deleting a user or a tenant never touches the log.
"""

import django.db.models.deletion
from django.conf import settings
from django.db import migrations, models

APPEND_ONLY = """
CREATE OR REPLACE FUNCTION kb_audit_append_only() RETURNS trigger LANGUAGE plpgsql AS $fn$
BEGIN
    RAISE EXCEPTION 'the audit log is append-only: % of an audit event is refused', TG_OP
        USING ERRCODE = 'insufficient_privilege';
END $fn$;
CREATE TRIGGER core_auditevent_append_only BEFORE UPDATE OR DELETE ON core_auditevent
    FOR EACH ROW EXECUTE FUNCTION kb_audit_append_only();
SELECT kb_rls_enable();
REVOKE UPDATE, DELETE, TRUNCATE ON core_auditevent FROM kb_app;
"""
APPEND_ONLY_UNDO = """
DROP TRIGGER IF EXISTS core_auditevent_append_only ON core_auditevent;
DROP FUNCTION IF EXISTS kb_audit_append_only();
"""


class Migration(migrations.Migration):
    dependencies = [
        ("core", "0003_tenant_embedder_known"),
        # kb_rls_enable() and the role kb_app
        ("knowledge", "0019_documentversion_tenant"),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.CreateModel(
            name="TenantQuota",
            fields=[
                ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                ("max_documents", models.PositiveBigIntegerField(blank=True, help_text="Live documents.", null=True)),
                (
                    "max_stored_bytes",
                    models.PositiveBigIntegerField(
                        blank=True,
                        help_text="Bytes (UTF-8) of the stored text of every kept version.",
                        null=True,
                    ),
                ),
                ("max_chunks", models.PositiveBigIntegerField(blank=True, help_text="Searchable chunks.", null=True)),
                ("max_sources", models.PositiveIntegerField(blank=True, help_text="Sources of any kind.", null=True)),
                (
                    "max_syncs_per_day",
                    models.PositiveIntegerField(blank=True, help_text="Sync runs in 24 hours.", null=True),
                ),
                (
                    "max_llm_tokens_per_day",
                    models.PositiveBigIntegerField(
                        blank=True, help_text="LLM tokens (prompt + completion) in 24 hours.", null=True
                    ),
                ),
                ("updated_at", models.DateTimeField(auto_now=True)),
                (
                    "tenant",
                    models.OneToOneField(
                        on_delete=django.db.models.deletion.CASCADE, related_name="quota", to="core.tenant"
                    ),
                ),
            ],
        ),
        migrations.CreateModel(
            name="AuditEvent",
            fields=[
                ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                (
                    "actor_label",
                    models.CharField(help_text="The username, or 'operator (CLI)', 'system'.", max_length=200),
                ),
                (
                    "action",
                    models.CharField(help_text="e.g. source.created, signin.failed, token.revoked.", max_length=64),
                ),
                ("object_type", models.CharField(blank=True, max_length=64)),
                ("object_id", models.CharField(blank=True, max_length=64)),
                ("object_repr", models.CharField(blank=True, max_length=300)),
                (
                    "changes",
                    models.JSONField(blank=True, default=dict, help_text='{"field": [before, after]} or details.'),
                ),
                ("client_ip", models.GenericIPAddressField(blank=True, null=True)),
                ("created_at", models.DateTimeField(auto_now_add=True)),
                (
                    "actor",
                    models.ForeignKey(
                        blank=True,
                        db_constraint=False,
                        null=True,
                        on_delete=django.db.models.deletion.DO_NOTHING,
                        related_name="+",
                        to=settings.AUTH_USER_MODEL,
                    ),
                ),
                (
                    "tenant",
                    models.ForeignKey(
                        blank=True,
                        db_constraint=False,
                        null=True,
                        on_delete=django.db.models.deletion.DO_NOTHING,
                        related_name="+",
                        to="core.tenant",
                    ),
                ),
            ],
            options={
                "indexes": [models.Index(fields=["tenant", "-created_at"], name="auditevent_tenant_time")],
            },
        ),
        migrations.RunSQL(APPEND_ONLY, APPEND_ONLY_UNDO),
    ]
