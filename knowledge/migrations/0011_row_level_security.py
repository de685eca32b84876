"""Row-level security on every tenant-owned table (core.rls, docs/rls.md).

Creates the role ``kb_app`` (NOLOGIN, not a superuser, owns nothing, no BYPASSRLS): requests and
``tenant_context`` switch to it per transaction (``SET LOCAL ROLE`` via ``set_config``). Grants it
the rows it needs (now and, through default privileges, tables later migrations create), and
installs two functions the final migration of any later feature can run again:

- ``kb_rls_enable()``: RLS plus the policy ``kb_tenant_isolation``
  (``tenant_id = (SELECT current_setting('app.tenant_id')::bigint)``: the sub-select is an
  InitPlan, evaluated once per query and usable as an index condition, not once per row) on EVERY table of the schema with a
  ``tenant_id`` column, and the grants; returns the tables' names. Idempotent.
- ``kb_rls_enable_child(child, fk_column, parent)``: the same for a table without ``tenant_id``
  whose rows belong to a parent row: visible when the parent row is (the parent's own policy
  filters the policy's subquery).

The tables' owner (the role migrations run as) is not subject to the policies (no FORCE), so
migrations, commands, workers and the embedded server's setup work as before.
"""

from django.db import migrations

APP_ROLE = "kb_app"

# (child table, its foreign key column, the parent table carrying tenant_id)
CHILD_TABLES = [
    ("knowledge_documentversion", "document_id", "knowledge_document"),
    ("retrieval_tracestep", "trace_id", "retrieval_trace"),
    ("retrieval_turn", "conversation_id", "retrieval_conversation"),
    ("quality_judgment", "judgment_list_id", "quality_judgmentlist"),
    ("people_profile", "membership_id", "knowledge_membership"),
    ("knowledge_membershiptoken", "membership_id", "knowledge_membership"),
    ("knowledge_accessgroup_members", "accessgroup_id", "knowledge_accessgroup"),
]

CREATE_ROLE = f"""
DO $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = '{APP_ROLE}') THEN
        CREATE ROLE {APP_ROLE} NOLOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE NOBYPASSRLS;
    END IF;
EXCEPTION WHEN duplicate_object THEN
    NULL;  -- created meanwhile by a concurrent migration (roles are cluster-wide)
END $$;
DO $$
BEGIN
    -- A non-superuser owner must be a member of kb_app to SET ROLE to it; a superuser may anyway.
    IF NOT (SELECT rolsuper FROM pg_roles WHERE rolname = current_user) THEN
        EXECUTE format('GRANT {APP_ROLE} TO %I', current_user);
    END IF;
END $$;
ALTER DEFAULT PRIVILEGES IN SCHEMA public GRANT SELECT, INSERT, UPDATE, DELETE ON TABLES TO {APP_ROLE};
ALTER DEFAULT PRIVILEGES IN SCHEMA public GRANT USAGE, SELECT, UPDATE ON SEQUENCES TO {APP_ROLE};
"""

FUNCTIONS = f"""
CREATE OR REPLACE FUNCTION kb_rls_grant(app_role text DEFAULT '{APP_ROLE}') RETURNS void
LANGUAGE plpgsql AS $fn$
BEGIN
    EXECUTE format('GRANT USAGE ON SCHEMA %I TO %I', current_schema(), app_role);
    EXECUTE format('GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA %I TO %I', current_schema(), app_role);
    EXECUTE format('GRANT USAGE, SELECT, UPDATE ON ALL SEQUENCES IN SCHEMA %I TO %I', current_schema(), app_role);
END $fn$;

CREATE OR REPLACE FUNCTION kb_rls_enable(app_role text DEFAULT '{APP_ROLE}') RETURNS SETOF text
LANGUAGE plpgsql AS $fn$
DECLARE
    tbl regclass;
BEGIN
    PERFORM kb_rls_grant(app_role);
    FOR tbl IN
        SELECT c.oid::regclass
        FROM pg_class c
        JOIN pg_namespace n ON n.oid = c.relnamespace
        JOIN pg_attribute a ON a.attrelid = c.oid AND a.attname = 'tenant_id' AND NOT a.attisdropped
        WHERE n.nspname = current_schema() AND c.relkind IN ('r', 'p')
        ORDER BY c.relname
    LOOP
        EXECUTE format('ALTER TABLE %s ENABLE ROW LEVEL SECURITY', tbl);
        EXECUTE format('DROP POLICY IF EXISTS kb_tenant_isolation ON %s', tbl);
        EXECUTE format(
            'CREATE POLICY kb_tenant_isolation ON %s'
            ' USING (tenant_id = (SELECT NULLIF(current_setting(''app.tenant_id'', true), '''')::bigint))',
            tbl
        );
        RETURN NEXT tbl::text;
    END LOOP;
END $fn$;

CREATE OR REPLACE FUNCTION kb_rls_enable_child(child regclass, fk_column text, parent regclass) RETURNS void
LANGUAGE plpgsql AS $fn$
BEGIN
    EXECUTE format('ALTER TABLE %s ENABLE ROW LEVEL SECURITY', child);
    EXECUTE format('DROP POLICY IF EXISTS kb_tenant_isolation ON %s', child);
    EXECUTE format(
        'CREATE POLICY kb_tenant_isolation ON %s USING (EXISTS (SELECT 1 FROM %s p WHERE p.id = %I))',
        child, parent, fk_column
    );
END $fn$;
"""

# A signed-in user reads their own memberships in every tenant (a tenant switcher lists them);
# SELECT only, so no membership can be written outside the request's tenant.
MEMBER_SELF = """
CREATE POLICY kb_member_self ON knowledge_membership FOR SELECT
    USING (user_id = (SELECT NULLIF(current_setting('app.user_id', true), '')::bigint));
"""

ENABLE = (
    "SELECT kb_rls_enable();\n"
    + MEMBER_SELF
    + "".join(f"SELECT kb_rls_enable_child('{child}', '{fk}', '{parent}');\n" for child, fk, parent in CHILD_TABLES)
)

DISABLE = f"""
DROP POLICY IF EXISTS kb_member_self ON knowledge_membership;
DO $$
DECLARE
    tbl regclass;
BEGIN
    FOR tbl IN
        SELECT DISTINCT format('%I.%I', schemaname, tablename)::regclass FROM pg_policies
        WHERE schemaname = current_schema() AND policyname = 'kb_tenant_isolation'
    LOOP
        EXECUTE format('DROP POLICY kb_tenant_isolation ON %s', tbl);
        EXECUTE format('ALTER TABLE %s DISABLE ROW LEVEL SECURITY', tbl);
    END LOOP;
END $$;
DROP FUNCTION IF EXISTS kb_rls_enable(text);
DROP FUNCTION IF EXISTS kb_rls_enable_child(regclass, text, regclass);
ALTER DEFAULT PRIVILEGES IN SCHEMA public REVOKE ALL ON TABLES FROM {APP_ROLE};
ALTER DEFAULT PRIVILEGES IN SCHEMA public REVOKE ALL ON SEQUENCES FROM {APP_ROLE};
REVOKE ALL ON ALL TABLES IN SCHEMA public FROM {APP_ROLE};
REVOKE ALL ON ALL SEQUENCES IN SCHEMA public FROM {APP_ROLE};
REVOKE ALL ON SCHEMA public FROM {APP_ROLE};
DROP FUNCTION IF EXISTS kb_rls_grant(text);
"""


class Migration(migrations.Migration):
    dependencies = [
        ("knowledge", "0010_access_rules"),
        # Their tenant-owned tables must exist when kb_rls_enable() walks the schema.
        ("retrieval", "0005_citation_opens"),
        ("quality", "0003_judgment_generation"),
        ("people", "0001_initial"),
    ]

    operations = [
        migrations.RunSQL(CREATE_ROLE + FUNCTIONS + ENABLE, DISABLE),
    ]
