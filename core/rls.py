"""Row-level security (RLS): PostgreSQL keeps each tenant's rows out of other tenants' queries.

Defence in depth behind the application's own tenant filter (``TenantScopedQuerySet.for_tenant``,
``RetrievalFilter``): every table with a ``tenant_id`` column (and the child tables listed in
``knowledge/migrations/0011_row_level_security.py``) has the policy
``tenant_id = current_setting('app.tenant_id')::bigint``, which binds the non-superuser role
``kb_app`` (it owns no table, so the policy applies to it). A query that forgets the tenant
filter then returns no rows instead of another tenant's. See ``docs/rls.md``.

Scopes (one ``ContextVar``, so they follow the code path, not the connection):

- no scope (migrations, management commands, the embedded server's setup, tests' own setup):
  the session role (the runtime login, ``BYPASSRLS``, owner of nothing: ``core.db_roles``; the
  tables' owner for migrations and under the test suite) runs every statement. Celery tasks start in the bypass
  and bind their object's tenant with ``tenant_context`` (``rls_celery_connect``). This is the
  documented bypass, as is ``rls_bypass()`` inside a scope (explicitly marked code paths only:
  resolving a request's tenant from the user's memberships, DDL, superuser admin).
- ``tenant_context(tenant_id)``: statements run as ``kb_app`` with ``app.tenant_id`` set.
- a request scope (``RowLevelSecurityMiddleware``): statements run as ``kb_app`` with no tenant
  (they see no tenant-owned row) until the code that resolves the request's tenant calls
  ``rls_request_bind(tenant_id=...)``; a superuser's admin pages run in ``rls_bypass()``.

How (after PostgREST's per-request ``SET LOCAL ROLE`` + ``set_config(..., true)``,
https://postgrest.org/en/stable/references/transactions.html): ``core.postgresql``'s database
wrapper passes every statement through ``rls_execute``. Inside a transaction the settings are
applied with one ``SELECT set_config('role', ..., true), set_config('app.tenant_id', ..., true)``
before the first statement that needs them (again only after the scope changes or a savepoint
rolls back); in autocommit mode a scoped statement runs in its own short transaction with them.
Both settings are transaction-local, so they end with the transaction and can never leak to the
next request on a pooled or persistent connection.
"""

from __future__ import annotations

import contextvars
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass

from django.conf import settings
from psycopg import pq

APP_ROLE = "kb_app"

# The settings a transaction starts with: the session role, no tenant, no user.
SESSION_DEFAULTS = ("none", "", "")
# After a savepoint rollback the settings may have reverted to anything: apply them again.
UNKNOWN = ("?", "?", "?")

_SET = "SELECT set_config('role', %s, true), set_config('app.tenant_id', %s, true), set_config('app.user_id', %s, true)"


@dataclass
class RlsScope:
    """What the statements of a code path run as.

    ``bypass``: as the session role (the runtime login; RLS does not apply). Otherwise as ``kb_app`` with
    ``app.tenant_id`` = ``tenant_id`` (``None``: no tenant, so no tenant-owned row is visible) and
    ``app.user_id`` = ``user_id`` (the user's own memberships in other tenants stay readable,
    policy ``kb_member_self``, e.g. for a tenant switcher).
    ``request``: a portal/API request's scope, which ``rls_request_bind`` may narrow to a tenant.
    """

    tenant_id: int | None = None
    bypass: bool = False
    request: bool = False
    user_id: int | None = None

    def settings(self) -> tuple[str, str, str]:
        """``(role, app.tenant_id, app.user_id)`` for ``set_config``; ``SESSION_DEFAULTS`` = the session's own."""
        if self.bypass:
            return SESSION_DEFAULTS
        return (
            APP_ROLE,
            "" if self.tenant_id is None else str(int(self.tenant_id)),
            "" if self.user_id is None else str(int(self.user_id)),
        )


_scope: contextvars.ContextVar[RlsScope | None] = contextvars.ContextVar("kb_rls_scope", default=None)


def rls_enabled() -> bool:
    """``settings.KB_RLS``: whether statements in a scope run under row-level security."""
    return settings.KB_RLS


def rls_scope() -> RlsScope | None:
    """The current scope, ``None`` outside any."""
    return _scope.get()


@contextmanager
def _entered(scope: RlsScope) -> Iterator[RlsScope]:
    token = _scope.set(scope)
    try:
        yield scope
    finally:
        _scope.reset(token)


def tenant_context(tenant_id: int) -> AbstractContextManager[RlsScope]:
    """Run the block's statements as ``kb_app`` for tenant ``tenant_id`` (an int or a ``Tenant``).

    Nestable; on exit the enclosing scope applies again (the next statement re-applies it).
    Use it in Celery tasks and commands that work for one tenant.
    """
    tenant_id = getattr(tenant_id, "pk", tenant_id)
    return _entered(RlsScope(tenant_id=int(tenant_id)))


def rls_bypass() -> AbstractContextManager[RlsScope]:
    """Run the block's statements as the session role (the runtime login, ``BYPASSRLS``, which owns
    nothing and may only read and add to the audit log: ``core.db_roles``): RLS does not apply.

    Only for explicitly marked code paths: resolving a request's tenant from the user's
    memberships (which span tenants), DDL such as index builds, superuser admin pages.
    """
    return _entered(RlsScope(bypass=True))


def rls_request_scope(*, bypass: bool = False) -> AbstractContextManager[RlsScope]:
    """A request's scope: no tenant until ``rls_request_bind`` (``RowLevelSecurityMiddleware``)."""
    return _entered(RlsScope(bypass=bypass, request=True))


def rls_request_bind(*, tenant_id: int, user_id: int | None = None) -> None:
    """Narrow the current request's scope to ``tenant_id`` (and the signed-in ``user_id``); called
    by whatever resolves the request's tenant (``knowledge.selectors.membership_for_user``,
    ``core.admin.admin_tenant``).

    Outside a request scope (commands, tasks, tests' direct calls) and in a bypassed request
    (superuser admin) it does nothing.
    """
    scope = _scope.get()
    if scope is not None and scope.request and not scope.bypass:
        scope.tenant_id = int(tenant_id)
        scope.user_id = None if user_id is None else int(user_id)


def _set_sql(wanted: tuple[str, str, str]) -> str:
    """The ``set_config`` statement with its values inlined (a role name of ours and two integers,
    validated here), so it can share a simple-protocol round trip with ``BEGIN``."""
    role, tenant_id, user_id = wanted
    if role not in (APP_ROLE, "none") or not all(v == "" or v.isdigit() for v in (tenant_id, user_id)):
        raise ValueError(f"Bad row-level-security settings: {wanted!r}")
    return _SET.replace("%s", "'{}'").format(role, tenant_id, user_id)


def _apply(connection, wanted: tuple[str, str, str]) -> None:
    if connection.connection.info.transaction_status == pq.TransactionStatus.INERROR:
        return  # an aborted transaction runs nothing but its rollback (which goes through here)
    connection.connection.execute(_set_sql(wanted))
    connection.rls_applied = wanted


def rls_execute(execute, sql, params, many, context):
    """Django execute wrapper (installed by ``core.postgresql``): apply the scope's settings.

    Outside any scope, with nothing applied in the current transaction, it costs one
    ``ContextVar`` lookup. Inside a transaction the settings are sent once per transaction (and
    after a scope change or savepoint rollback); a scoped statement in autocommit mode runs in
    its own transaction: ``BEGIN; set_config`` (one round trip), the statement, ``COMMIT``.
    """
    scope = _scope.get()
    connection = context["connection"]
    applied = getattr(connection, "rls_applied", SESSION_DEFAULTS)
    if scope is None and applied == SESSION_DEFAULTS:
        return execute(sql, params, many, context)
    if not rls_enabled():
        if applied != SESSION_DEFAULTS and not connection.get_autocommit():
            _apply(connection, SESSION_DEFAULTS)  # switched off mid-transaction (tests): drop what was applied
        return execute(sql, params, many, context)
    wanted = SESSION_DEFAULTS if scope is None else scope.settings()
    if not connection.get_autocommit():
        if applied != wanted:
            _apply(connection, wanted)
        return execute(sql, params, many, context)
    if wanted == SESSION_DEFAULTS:
        # Autocommit: each statement is its own transaction and starts with the session's
        # settings; no transaction is opened (CREATE INDEX CONCURRENTLY must run outside one).
        return execute(sql, params, many, context)
    # One round trip for BEGIN and the settings (simple query protocol), one for COMMIT. Django
    # stays in autocommit mode meanwhile: a server-side cursor is declared WITH HOLD, so it
    # outlives the COMMIT like any autocommit statement's.
    raw = connection.connection
    raw.execute("BEGIN; " + _set_sql(wanted))
    try:
        result = execute(sql, params, many, context)
    except BaseException:
        if not raw.closed:
            raw.execute("ROLLBACK")
        raise
    raw.execute("COMMIT")
    return result


def rls_transaction_ended(connection) -> None:
    """The transaction ended (commit, rollback, close): its settings are gone."""
    connection.rls_applied = SESSION_DEFAULTS


def rls_savepoint_rolled_back(connection) -> None:
    """A savepoint rollback may have undone settings applied inside it: re-apply next time."""
    connection.rls_applied = UNKNOWN


class RowLevelSecurityMiddleware:
    """Every request runs in a request scope (``rls_request_scope``): statements run as ``kb_app``
    with no tenant until the view resolves the user's tenant (``rls_request_bind``).

    A superuser's ``/admin/`` pages bypass RLS (the admin shows every tenant to superusers).
    A streaming response's body runs in the same scope. Place after authentication.
    """

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        if not rls_enabled():
            return self.get_response(request)
        with rls_request_scope(bypass=_superuser_admin(request)) as scope:
            response = self.get_response(request)
        if getattr(response, "streaming", False):
            response.streaming_content = _streamed_in(scope, response.streaming_content)
        return response


def _superuser_admin(request) -> bool:
    from django.urls import reverse

    if not request.path.startswith(reverse("admin:index")):
        return False
    user = getattr(request, "user", None)
    return bool(user is not None and user.is_superuser)


def _streamed_in(scope: RlsScope, content):
    """Iterate ``content`` (a streaming response's body) with ``scope`` current for each chunk."""
    iterator = iter(content)
    while True:
        with _entered(scope):
            try:
                chunk = next(iterator)
            except StopIteration:
                return
        yield chunk


# ---- Celery ---------------------------------------------------------------------------------


def tenant_id_of(model, pk: int) -> int | None:
    """The ``tenant_id`` of ``model``'s row ``pk``, read in ``rls_bypass``, or ``None``
    when the row is gone: how a task that takes an id finds the tenant to bind with
    ``tenant_context`` before it touches that tenant's data."""
    with rls_bypass():
        return model._default_manager.filter(pk=pk).values_list("tenant_id", flat=True).first()


_task_tokens: dict[str, contextvars.Token] = {}


def _task_prerun(task_id=None, **kwargs) -> None:
    _task_tokens[task_id] = _scope.set(RlsScope(bypass=True))


def _task_postrun(task_id=None, **kwargs) -> None:
    token = _task_tokens.pop(task_id, None)
    if token is not None:
        _scope.reset(token)


def rls_celery_connect() -> None:
    """Start every Celery task in ``rls_bypass()``: a task run eagerly inside a request (no broker)
    must not inherit the request's scope, and a task first has to read which tenant its id
    belongs to (``tenant_id_of``). Every task that works for one tenant then binds it with
    ``tenant_context`` (ingestion jobs, near-duplicates, the quality gate, judgment generation
    and evaluation); only genuinely cross-tenant tasks stay in the bypass (lease recovery,
    trace retention): ``docs/rls.md``."""
    from celery.signals import task_postrun, task_prerun

    task_prerun.connect(_task_prerun, weak=False, dispatch_uid="kb_rls_task_prerun")
    task_postrun.connect(_task_postrun, weak=False, dispatch_uid="kb_rls_task_postrun")
