"""The app role keeps only SELECT and INSERT on the audit log, whatever later migrations grant.

``kb_rls_enable()`` (knowledge migration 0011), which every migration adding a tenant table runs,
grants ``kb_app`` every right on every table through ``kb_rls_grant()``; that would give back the
UPDATE and DELETE on ``core_auditevent`` that core 0004 revoked. ``kb_rls_grant()`` now revokes
them again after each grant, and they are revoked once more here.
"""

from django.db import migrations

GRANT = """
CREATE OR REPLACE FUNCTION kb_rls_grant(app_role text DEFAULT 'kb_app') RETURNS void
LANGUAGE plpgsql AS $fn$
BEGIN
    EXECUTE format('GRANT USAGE ON SCHEMA %I TO %I', current_schema(), app_role);
    EXECUTE format('GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA %I TO %I', current_schema(), app_role);
    EXECUTE format('GRANT USAGE, SELECT, UPDATE ON ALL SEQUENCES IN SCHEMA %I TO %I', current_schema(), app_role);
    -- The audit log is append-only: insert and read, never change (core 0004's trigger, too).
    IF to_regclass(format('%I.core_auditevent', current_schema())) IS NOT NULL THEN
        EXECUTE format('REVOKE UPDATE, DELETE, TRUNCATE ON %I.core_auditevent FROM %I', current_schema(), app_role);
    END IF;
END $fn$;
SELECT kb_rls_grant();
"""

GRANT_BEFORE = """
CREATE OR REPLACE FUNCTION kb_rls_grant(app_role text DEFAULT 'kb_app') RETURNS void
LANGUAGE plpgsql AS $fn$
BEGIN
    EXECUTE format('GRANT USAGE ON SCHEMA %I TO %I', current_schema(), app_role);
    EXECUTE format('GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA %I TO %I', current_schema(), app_role);
    EXECUTE format('GRANT USAGE, SELECT, UPDATE ON ALL SEQUENCES IN SCHEMA %I TO %I', current_schema(), app_role);
END $fn$;
"""


class Migration(migrations.Migration):
    dependencies = [
        ("core", "0004_quota_and_audit"),
        ("knowledge", "0020_foldergrant"),  # which ran kb_rls_enable() after core 0004's revoke
    ]

    operations = [migrations.RunSQL(GRANT, GRANT_BEFORE)]
