"""The database's two roles: the runtime login and the tables' owner (docs/deployment.md#database-roles).

- The **runtime role** (``settings.KB_DATABASE_RUNTIME``: ``DATABASE_URL``; the embedded server's
  ``kb_runtime``) is what the server, the Celery workers and the management commands connect as:
  not a superuser, owner of nothing, ``BYPASSRLS`` (so ``core.rls.rls_bypass`` sees every tenant)
  and a member of ``kb_app`` (its table rights, and ``SET ROLE kb_app`` for requests). It may only
  read and add to the audit log, so ``TRUNCATE``, ``ALTER TABLE ... DISABLE TRIGGER`` and
  ``SET session_replication_role`` are refused to it by PostgreSQL.
- The **owner** (``settings.KB_DATABASE_OWNER``: ``DATABASE_OWNER_URL``; the embedded server's
  ``postgres``) runs the migrations: ``manage.py migrate`` (``core/management/commands/migrate.py``)
  connects as it through ``owner_connection``, and nothing else does. The only DDL the application
  runs itself, knowledge_chunk's HNSW indexes, goes through two functions the owner made for it
  (``kb_vector_index_create``, ``kb_vector_index_drop``: ``core/migrations/0006_runtime_role.py``).

``database_roles_check`` (``manage.py check --deploy``) warns when the application connects as a
superuser or as an owner of the tables, when it may change the audit log, and when the runtime
role lacks ``BYPASSRLS`` or ``kb_app``.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from django.conf import settings
from django.core import checks
from django.db import DEFAULT_DB_ALIAS, DatabaseError, connections

from core.rls import APP_ROLE

# The connection settings that make a login; the database's NAME stays the connection's own (under
# the test runner that is the test database).
LOGIN_KEYS = ("USER", "PASSWORD", "HOST", "PORT", "OPTIONS")
AUDIT_TABLE = "core_auditevent"
SETUP = "docs/deployment.md#database-roles"


def _login(settings_dict: dict) -> tuple:
    return tuple(settings_dict.get(key) or None for key in LOGIN_KEYS)


@contextmanager
def login_connection(login: dict, *, alias: str = DEFAULT_DB_ALIAS) -> Iterator:
    """Connect ``alias`` with ``login``'s credentials (``LOGIN_KEYS`` of a ``DATABASES`` entry) for
    the block, in this thread only; yields the connection (``django.db.connection`` for "default").

    The database (``NAME``) stays the connection's own. When ``login`` is the connection's login
    already, the connection is yielded as it is. On exit the block's connection is closed and the
    thread's earlier one (still open, if it was) is back. Raises ``RuntimeError`` inside a
    transaction of the connection, whose statements could not move to another login.
    """
    current = connections[alias]
    if _login(current.settings_dict) == _login(login):
        yield current
        return
    if current.in_atomic_block:
        raise RuntimeError(f"Cannot switch the login of {alias!r} inside a transaction.")
    settings_dict = {**current.settings_dict, **{key: login.get(key, "") for key in LOGIN_KEYS}}
    settings_dict["OPTIONS"] = dict(login.get("OPTIONS") or {})
    switched = current.__class__(settings_dict, alias)
    connections[alias] = switched
    try:
        yield switched
    finally:
        try:
            switched.close()
        finally:
            connections[alias] = current


@contextmanager
def owner_connection(*, alias: str = DEFAULT_DB_ALIAS) -> Iterator:
    """``login_connection`` with the tables' owner (``settings.KB_DATABASE_OWNER``) for "default",
    which ``manage.py migrate`` runs in; another ``alias`` is yielded as it is."""
    if alias != DEFAULT_DB_ALIAS:
        yield connections[alias]
        return
    with login_connection(settings.KB_DATABASE_OWNER, alias=alias) as connection:
        yield connection


@dataclass(frozen=True)
class DatabaseRole:
    """What the role a connection logged in as may do.

    ``name``; ``superuser``; ``bypassrls``; ``app_member``: a member of ``kb_app`` (``None`` when
    ``kb_app`` does not exist yet, before the first migration); ``owned``: the tables of the
    schema it owns or is a member of an owner of (all of them for a superuser);
    ``audit_writable``: it may UPDATE, DELETE or TRUNCATE the audit log.
    """

    name: str
    superuser: bool
    bypassrls: bool
    app_member: bool | None
    owned: tuple[str, ...]
    audit_writable: bool


_ROLE_SQL = """
SELECT r.rolname, r.rolsuper, r.rolbypassrls,
       (SELECT pg_has_role(r.oid, a.oid, 'MEMBER') FROM pg_roles a WHERE a.rolname = %s),
       ARRAY(SELECT c.relname::text FROM pg_class c
             WHERE c.relnamespace = current_schema()::regnamespace AND c.relkind IN ('r', 'p')
               AND pg_has_role(r.oid, c.relowner, 'MEMBER')
             ORDER BY c.relname),
       COALESCE(has_table_privilege(r.oid, to_regclass(%s), 'UPDATE, DELETE, TRUNCATE'), false)
FROM pg_roles r WHERE r.rolname = session_user
"""


def database_role(connection) -> DatabaseRole:
    """The ``DatabaseRole`` of ``connection``'s login (its session user: the same inside a scope
    of ``core.rls``, which only switches the current user). Raises ``DatabaseError`` when the
    database cannot be reached."""
    with connection.cursor() as cursor:
        cursor.execute(_ROLE_SQL, [APP_ROLE, AUDIT_TABLE])
        name, superuser, bypassrls, app_member, owned, audit_writable = cursor.fetchone()
    return DatabaseRole(name, superuser, bypassrls, app_member, tuple(owned), audit_writable)


def database_role_warnings(role: DatabaseRole) -> list[checks.CheckMessage]:
    """The system check's warnings for the application connecting as ``role`` (empty when it is a
    proper runtime role): ``core.W001`` superuser, ``core.W002`` owner of tables, ``core.W003``
    may change the audit log, ``core.W004`` lacks ``BYPASSRLS`` or membership of ``kb_app``."""
    hint = (
        f"Connect as a runtime role that is neither a superuser nor an owner (DATABASE_URL) and run migrate "
        f"as the owner (DATABASE_OWNER_URL): {SETUP}."
    )
    warnings: list[checks.CheckMessage] = []
    if role.superuser:
        warnings.append(
            checks.Warning(
                f"The application connects to the database as {role.name!r}, a superuser: it could empty or "
                "rewrite the audit log (TRUNCATE, session_replication_role) and bypass every other guard.",
                hint=hint,
                id="core.W001",
            )
        )
    if role.owned:
        audit = f", {AUDIT_TABLE} among them" if AUDIT_TABLE in role.owned else ""
        warnings.append(
            checks.Warning(
                f"The application connects to the database as {role.name!r}, which owns {len(role.owned)} of its "
                f"tables{audit}: it could TRUNCATE them, disable their triggers and row-level security.",
                hint=hint,
                id="core.W002",
            )
        )
    if role.audit_writable and not (role.superuser or role.owned):
        warnings.append(
            checks.Warning(
                f"The application's database role {role.name!r} may UPDATE, DELETE or TRUNCATE {AUDIT_TABLE}.",
                hint=f"REVOKE UPDATE, DELETE, TRUNCATE ON {AUDIT_TABLE} FROM {role.name}; ({SETUP}).",
                id="core.W003",
            )
        )
    if not (role.superuser or role.owned):
        missing = [
            what
            for what, ok in (("BYPASSRLS", role.bypassrls), (f"membership of {APP_ROLE}", role.app_member is not False))
            if not ok
        ]
        if missing:
            warnings.append(
                checks.Warning(
                    f"The application's database role {role.name!r} lacks {' and '.join(missing)}: commands, tasks "
                    "and tenant look-ups would see no tenant's rows, or requests could not switch to "
                    f"{APP_ROLE}.",
                    hint=f"ALTER ROLE {role.name} BYPASSRLS; GRANT {APP_ROLE} TO {role.name}; ({SETUP}).",
                    id="core.W004",
                )
            )
    return warnings


def database_roles_check(app_configs=None, databases=None, **kwargs) -> list[checks.CheckMessage]:
    """System check (``manage.py check --deploy``): ``database_role_warnings`` for the "default"
    connection's login; ``core.W005`` when the database cannot be reached to tell."""
    if databases is not None and DEFAULT_DB_ALIAS not in databases:
        return []
    try:
        role = database_role(connections[DEFAULT_DB_ALIAS])
    except DatabaseError as exc:
        return [
            checks.Warning(
                f"Could not check the application's database role: {exc}".strip(),
                hint=f"Run the check where the database is reachable ({SETUP}).",
                id="core.W005",
            )
        ]
    return database_role_warnings(role)
