"""The runtime role ``kb_runtime``: what the server, the workers and the commands connect as, instead
of the tables' owner, which from now on only runs the migrations (core.db_roles,
docs/deployment.md#database-roles).

- ``kb_runtime`` is created (``NOLOGIN``) when it does not exist and the migrating role may create
  roles; the embedded server's setup (``config/embedded_db.py``) or the operator makes it
  ``LOGIN ... BYPASSRLS``. It owns nothing.
- ``kb_vector_index_create(name, embedder, dimensions, tenant)`` and ``kb_vector_index_drop(name)``:
  ``SECURITY DEFINER`` functions of the owner that build and drop knowledge_chunk's HNSW indexes
  (``knowledge.vector_index``), the only DDL the application runs; they accept only those indexes'
  names, quote every value, and run with a fixed ``search_path``.
- ``kb_runtime_grant(role)`` (idempotent; run again by an operator who creates the role after this
  migration): makes the role a member of ``kb_app``, whose rights it then holds (SELECT, INSERT,
  UPDATE, DELETE on every table but only SELECT and INSERT on the audit log, ``kb_rls_grant``) and
  to which requests switch; EXECUTE on the two functions; on PostgreSQL 17 and later MAINTAIN
  (VACUUM, ANALYZE after an ingestion) on every table but the audit log, now and later.
"""

from django.db import migrations

RUNTIME_ROLE = "kb_runtime"

ROLE = f"""
DO $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = '{RUNTIME_ROLE}')
       AND (SELECT rolsuper OR rolcreaterole FROM pg_roles WHERE rolname = current_user) THEN
        CREATE ROLE {RUNTIME_ROLE} NOLOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE;
    END IF;
EXCEPTION WHEN duplicate_object THEN
    NULL;  -- created meanwhile by a concurrent migration (roles are cluster-wide)
END $$;
"""

FUNCTIONS = f"""
CREATE OR REPLACE FUNCTION kb_vector_index_create(
    index_name text, embedder_key text, dimensions integer, tenant bigint DEFAULT NULL
) RETURNS void LANGUAGE plpgsql SECURITY DEFINER AS $fn$
BEGIN
    IF index_name IS NULL OR index_name !~ '^chunk_emb_[a-z0-9]{{1,40}}(_t[0-9]{{1,19}})?_hnsw$'
       OR (tenant IS NULL) = (index_name ~ '_t[0-9]+_hnsw$')
       OR (tenant IS NOT NULL AND index_name !~ ('_t' || tenant || '_hnsw$')) THEN
        RAISE EXCEPTION 'kb_vector_index_create: % is not the HNSW index name of embedder % and tenant %',
            index_name, embedder_key, tenant USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF embedder_key IS NULL OR dimensions IS NULL OR dimensions NOT BETWEEN 1 AND 16000 THEN
        RAISE EXCEPTION 'kb_vector_index_create: bad embedder % or dimensions %', embedder_key, dimensions
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    EXECUTE format(
        'CREATE INDEX IF NOT EXISTS %I ON knowledge_chunk USING hnsw ((embedding::vector(%s)) vector_cosine_ops)'
        ' WHERE %s',
        index_name, dimensions,
        CASE WHEN tenant IS NULL THEN format('embedder = %L', embedder_key)
             ELSE format('embedder = %L AND tenant_id = %s', embedder_key, tenant) END
    );
END $fn$;

CREATE OR REPLACE FUNCTION kb_vector_index_drop(index_name text) RETURNS void
LANGUAGE plpgsql SECURITY DEFINER AS $fn$
BEGIN
    IF index_name IS NULL OR index_name !~ '^chunk_emb_[a-z0-9]{{1,40}}_t[0-9]{{1,19}}_hnsw$' THEN
        RAISE EXCEPTION 'kb_vector_index_drop: % is not the name of a tenant''s HNSW index', index_name
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF EXISTS (
        SELECT 1 FROM pg_class c JOIN pg_index i ON i.indexrelid = c.oid
        WHERE c.relname = index_name AND c.relnamespace = current_schema()::regnamespace
          AND i.indrelid <> 'knowledge_chunk'::regclass
    ) THEN
        RAISE EXCEPTION 'kb_vector_index_drop: % is not an index of knowledge_chunk', index_name
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    EXECUTE format('DROP INDEX IF EXISTS %I', index_name);
END $fn$;

-- Definer functions resolve names in this schema (and pgvector's, on the migration's search path)
-- only, with the caller's temporary tables last.
DO $$
BEGIN
    EXECUTE format('ALTER FUNCTION kb_vector_index_create(text, text, integer, bigint) SET search_path = %s, pg_temp',
                   current_setting('search_path'));
    EXECUTE format('ALTER FUNCTION kb_vector_index_drop(text) SET search_path = %s, pg_temp',
                   current_setting('search_path'));
END $$;
REVOKE ALL ON FUNCTION kb_vector_index_create(text, text, integer, bigint) FROM PUBLIC;
REVOKE ALL ON FUNCTION kb_vector_index_drop(text) FROM PUBLIC;

CREATE OR REPLACE FUNCTION kb_runtime_grant(runtime_role text DEFAULT '{RUNTIME_ROLE}') RETURNS void
LANGUAGE plpgsql AS $fn$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = runtime_role) THEN
        RAISE NOTICE 'No role %: create it (docs/deployment.md#database-roles), then run SELECT kb_runtime_grant();',
            runtime_role;
        RETURN;
    END IF;
    IF NOT pg_has_role(runtime_role, 'kb_app', 'MEMBER') THEN
        EXECUTE format('GRANT kb_app TO %I', runtime_role);
    END IF;
    EXECUTE format(
        'GRANT EXECUTE ON FUNCTION kb_vector_index_create(text, text, integer, bigint), kb_vector_index_drop(text)'
        ' TO %I', runtime_role
    );
    IF current_setting('server_version_num')::int >= 170000 THEN
        EXECUTE format('GRANT MAINTAIN ON ALL TABLES IN SCHEMA %I TO %I', current_schema(), runtime_role);
        EXECUTE format('ALTER DEFAULT PRIVILEGES IN SCHEMA %I GRANT MAINTAIN ON TABLES TO %I',
                       current_schema(), runtime_role);
        IF to_regclass('core_auditevent') IS NOT NULL THEN
            EXECUTE format('REVOKE MAINTAIN ON core_auditevent FROM %I', runtime_role);
        END IF;
    END IF;
END $fn$;

SELECT kb_runtime_grant();
"""

REVERSE = f"""
DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = '{RUNTIME_ROLE}')
       AND current_setting('server_version_num')::int >= 170000 THEN
        EXECUTE format('REVOKE MAINTAIN ON ALL TABLES IN SCHEMA %I FROM {RUNTIME_ROLE}', current_schema());
        EXECUTE format('ALTER DEFAULT PRIVILEGES IN SCHEMA %I REVOKE MAINTAIN ON TABLES FROM {RUNTIME_ROLE}',
                       current_schema());
    END IF;
END $$;
DROP FUNCTION IF EXISTS kb_runtime_grant(text);
DROP FUNCTION IF EXISTS kb_vector_index_create(text, text, integer, bigint);
DROP FUNCTION IF EXISTS kb_vector_index_drop(text);
"""


class Migration(migrations.Migration):
    dependencies = [
        ("core", "0005_audit_log_stays_append_only"),
        ("knowledge", "0011_row_level_security"),  # kb_app
    ]

    operations = [migrations.RunSQL(ROLE + FUNCTIONS, REVERSE)]
