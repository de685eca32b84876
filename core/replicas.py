"""Reads from PostgreSQL streaming replicas: search, ask and the portal's reading pages.

``DATABASE_REPLICA_URLS`` adds one database alias per replica (``replica1``, ``replica2``...,
``settings.KB_REPLICA_ALIASES``). Nothing reads from them by default: only a code path marked
with ``replica_reads`` (``retrieval.search.chunk_search``, ``people.asking``'s runs, the portal's
reading pages) does, and even there a read goes to the primary (``default``) when

- no replica is healthy: one that fails to connect is skipped for ``KB_REPLICA_RETRY_S`` seconds,
  one lagging more than ``KB_REPLICA_MAX_LAG_S`` seconds behind the primary is skipped until it
  catches up (its replay position is checked at most every ``KB_REPLICA_CHECK_S`` seconds);
- the member (or, for an ingestion, anyone in the tenant) wrote something the replica has not
  replayed yet: read-your-writes by WAL position (``replica_write_mark``), for at most
  ``KB_REPLICA_RYW_S`` seconds after the write;
- the code path already wrote in this run (``ReplicaRouter.db_for_write`` pins it to the primary)
  or runs inside a transaction on the primary (it must see its own uncommitted rows).

Writes, migrations, ingestion and everything unmarked use the primary. A replica that fails in the
middle of a marked run, before that run wrote anything, is marked down and the run is repeated on
the primary: the caller never sees the error. Row-level security, the access filter and the
tenant's HNSW index are the same on a replica (physical replication; the connection runs through
``core.postgresql`` like the primary's).

Raw SQL of the read paths takes its connection from ``read_connection()``; the ORM follows
``ReplicaRouter`` (``DATABASE_ROUTERS``). Where a write's position is kept: the cache alias
``replicas`` (Redis when ``REDIS_URL`` is set, so every web process sees it).
"""

from __future__ import annotations

import functools
import itertools
import logging
import threading
import time
from collections.abc import Callable
from contextvars import ContextVar
from dataclasses import dataclass
from typing import TypeVar

from django.conf import settings
from django.db import DEFAULT_DB_ALIAS, InterfaceError, OperationalError, connections

from core.rls import rls_bypass, rls_scope

logger = logging.getLogger(__name__)

F = TypeVar("F", bound=Callable)

_PRIMARY_LSN = "SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), '0/0')::bigint"
_REPLICA_STATE = (
    "SELECT pg_is_in_recovery(), pg_wal_lsn_diff(pg_last_wal_replay_lsn(), '0/0')::bigint,"
    " extract(epoch FROM now() - pg_last_xact_replay_timestamp())::float8"
)


@dataclass
class _ReadState:
    """A marked run: the replica it reads from (``None``: the primary) and whether it wrote."""

    alias: str | None
    wrote: bool = False


@dataclass
class ReplicaStatus:
    """What the last check of a replica found: ``up``; ``replay_lsn`` (bytes of WAL replayed);
    ``lag_s`` (0 when it had replayed everything the primary had written when checked, else the
    age of the last transaction it replayed); ``checked_at`` and ``down_until`` (``time.monotonic``)."""

    up: bool
    replay_lsn: int = 0
    lag_s: float = 0.0
    checked_at: float = 0.0
    down_until: float = 0.0


_state: ContextVar[_ReadState | None] = ContextVar("kb_replica_reads", default=None)
# A request's record of whether it wrote outside the marked read paths (``ReplicaWriteMiddleware``).
_request_wrote: ContextVar[list[bool] | None] = ContextVar("kb_replica_request_wrote", default=None)
_statuses: dict[str, ReplicaStatus] = {}
_lock = threading.Lock()
_turn = itertools.count()


def replica_aliases() -> list[str]:
    """The replicas' database aliases (``settings.KB_REPLICA_ALIASES``), empty without replicas."""
    return list(settings.KB_REPLICA_ALIASES)


def read_alias() -> str:
    """The alias the current code path reads from: a replica inside a ``replica_reads`` run that
    chose one, has not written and is not inside a transaction on the primary; else ``default``."""
    state = _state.get()
    if state is None or state.alias is None or state.wrote:
        return DEFAULT_DB_ALIAS
    if connections[DEFAULT_DB_ALIAS].in_atomic_block:
        return DEFAULT_DB_ALIAS
    return state.alias


def read_connection():
    """The Django connection for raw read SQL of a read path (``read_alias()``'s)."""
    return connections[read_alias()]


class ReplicaRouter:
    """``DATABASE_ROUTERS`` entry: marked runs read from their replica, everything writes to the
    primary (and a write pins the rest of its run to the primary), migrations run on the primary."""

    def db_for_read(self, model, **hints):
        # In a marked run always say where (after a write: the primary, even for rows of an
        # instance read from the replica); elsewhere leave it to Django (the instance's database).
        return None if _state.get() is None else read_alias()

    def db_for_write(self, model, **hints):
        state = _state.get()
        if state is not None:
            state.wrote = True
        else:
            wrote = _request_wrote.get()
            if wrote is not None:
                wrote[0] = True
        return DEFAULT_DB_ALIAS

    def allow_relation(self, obj1, obj2, **hints):
        return True

    def allow_migrate(self, db, app_label, model_name=None, **hints):
        return None if db == DEFAULT_DB_ALIAS else False


# ---- Health and lag ---------------------------------------------------------------------------


def _primary_lsn() -> int:
    with rls_bypass(), connections[DEFAULT_DB_ALIAS].cursor() as cursor:
        cursor.execute(_PRIMARY_LSN)
        return int(cursor.fetchone()[0])


def _down(alias: str) -> ReplicaStatus:
    now = time.monotonic()
    status = ReplicaStatus(up=False, checked_at=now, down_until=now + settings.KB_REPLICA_RETRY_S)
    with _lock:
        _statuses[alias] = status
    try:
        connections[alias].close()
    except Exception:  # noqa: BLE001 - a broken connection may fail to close; it is dropped anyway
        pass
    return status


def replica_status(alias: str, *, fresh: bool = False) -> ReplicaStatus:
    """``alias``'s status, checked again when older than ``KB_REPLICA_CHECK_S`` (or ``fresh``).

    A check costs one query on the primary (its WAL position) and one on the replica; a replica
    that cannot be reached, or that is not in recovery (promoted, misconfigured), is down for
    ``KB_REPLICA_RETRY_S`` seconds. Never raises for the replica's errors.
    """
    now = time.monotonic()
    with _lock:
        status = _statuses.get(alias)
    if status is not None:
        if not status.up and now < status.down_until:
            return status
        if status.up and not fresh and now - status.checked_at < settings.KB_REPLICA_CHECK_S:
            return status
    primary = _primary_lsn()
    try:
        with rls_bypass(), connections[alias].cursor() as cursor:
            cursor.execute(_REPLICA_STATE)
            in_recovery, replay_lsn, age_s = cursor.fetchone()
    except (OperationalError, InterfaceError) as exc:
        logger.warning("Replica %s is unreachable, reading from the primary: %s", alias, exc)
        return _down(alias)
    if not in_recovery or replay_lsn is None:
        logger.warning("Database %s is not a streaming replica; not reading from it.", alias)
        return _down(alias)
    lag_s = 0.0 if replay_lsn >= primary else float(age_s or 0.0)
    status = ReplicaStatus(up=True, replay_lsn=int(replay_lsn), lag_s=lag_s, checked_at=time.monotonic())
    with _lock:
        _statuses[alias] = status
    return status


def replica_statuses_forget() -> None:
    """Forget every replica's last check (tests, after stopping or starting a replica)."""
    with _lock:
        _statuses.clear()


# ---- Read-your-writes ---------------------------------------------------------------------------


def _marks():
    from django.core.cache import caches

    return caches["replicas"]


def _mark_key(tenant_id: int, user_id: int | None) -> str:
    return f"kb:replica-ryw:{int(tenant_id)}:{'all' if user_id is None else int(user_id)}"


def replica_write_mark(*, tenant_id: int, user_id: int | None = None) -> int | None:
    """Remember the primary's WAL position now, after a write by ``user_id`` in ``tenant_id``
    (``None``: for everyone in the tenant, e.g. an ingestion): their marked reads stay on the
    primary until a replica has replayed that position, for at most ``KB_REPLICA_RYW_S`` seconds.

    Call it after the write commits. Returns the position (bytes of WAL), ``None`` without
    replicas (then it costs nothing).
    """
    if not replica_aliases():
        return None
    lsn = _primary_lsn()
    marks = _marks()
    key = _mark_key(tenant_id, user_id)
    marks.set(key, max(lsn, marks.get(key) or 0), timeout=settings.KB_REPLICA_RYW_S)
    return lsn


def _needed_lsn(tenant_id: int | None, user_id: int | None) -> int:
    if tenant_id is None:
        return 0
    keys = [_mark_key(tenant_id, None)] + ([_mark_key(tenant_id, user_id)] if user_id is not None else [])
    return max([v for v in _marks().get_many(keys).values() if v] or [0])


def replica_choose(*, tenant_id: int | None = None, user_id: int | None = None) -> str | None:
    """A healthy replica alias for a read by ``user_id`` in ``tenant_id``, or ``None`` (the primary).

    Replicas take turns; one is skipped when down, lagging past ``KB_REPLICA_MAX_LAG_S``, or short
    of the reader's last write (checked again once before it is skipped). Never raises for a
    replica's errors.
    """
    aliases = replica_aliases()
    if not aliases:
        return None
    needed = _needed_lsn(tenant_id, user_id)
    start = next(_turn)
    for i in range(len(aliases)):
        alias = aliases[(start + i) % len(aliases)]
        status = replica_status(alias)
        if status.up and status.replay_lsn < needed:
            status = replica_status(alias, fresh=True)
        if status.up and status.lag_s <= settings.KB_REPLICA_MAX_LAG_S and status.replay_lsn >= needed:
            return alias
    return None


def _identity(args, kwargs) -> tuple[int | None, int | None]:
    """(tenant id, user id) of a marked call: its ``tenant``/``user`` keywords, or a view's request,
    or the row-level-security scope's."""
    tenant = kwargs.get("tenant")
    user = kwargs.get("user")
    if user is None and args and hasattr(args[0], "user") and hasattr(args[0], "method"):
        user = args[0].user
    scope = rls_scope()
    tenant_id = getattr(tenant, "pk", tenant)
    if tenant_id is None and scope is not None:
        tenant_id = scope.tenant_id
    user_id = getattr(user, "pk", None) if getattr(user, "is_authenticated", False) else None
    return (None if tenant_id is None else int(tenant_id)), user_id


def replica_reads(func: F) -> F:
    """Mark ``func`` as a read path: its reads may go to a replica (module docstring).

    The replica is chosen once per call for its tenant and user (``tenant=``/``user=`` keywords,
    a view's ``request.user``, or the row-level-security scope). If the replica fails before the
    call wrote anything, it is marked down and the call runs again on the primary. Nested marked
    calls keep the outer call's choice. Without replicas it only calls ``func``.
    """

    @functools.wraps(func)
    def wrapper(*args, **kwargs):
        if not replica_aliases() or _state.get() is not None:
            return func(*args, **kwargs)
        tenant_id, user_id = _identity(args, kwargs)
        state = _ReadState(alias=replica_choose(tenant_id=tenant_id, user_id=user_id))
        token = _state.set(state)
        try:
            return func(*args, **kwargs)
        except (OperationalError, InterfaceError):
            if state.alias is None or state.wrote or _alive(state.alias):
                raise
            logger.warning("Replica %s failed during a read; running it again on the primary.", state.alias)
            _down(state.alias)
            state.alias = None
            return func(*args, **kwargs)
        finally:
            _state.reset(token)

    return wrapper  # type: ignore[return-value]


def _alive(alias: str) -> bool:
    """Whether ``alias`` still answers (so an error came from elsewhere)."""
    try:
        connections[alias].close()
        with rls_bypass(), connections[alias].cursor() as cursor:
            cursor.execute("SELECT 1")
        return True
    except (OperationalError, InterfaceError):
        return False


class ReplicaWriteMiddleware:
    """After a successful POST, PUT, PATCH or DELETE bound to a tenant that wrote through the ORM
    outside the marked read paths, remember the primary's WAL position for that member
    (``replica_write_mark``), so their next reads see what they changed. A search's or an answer's
    own writes (its trace) do not count: an answer's conversation turn is marked where it is kept
    (``people.conversations``), and traces are read on the primary. Place right after
    ``core.rls.RowLevelSecurityMiddleware`` (it reads the request's tenant from that scope).
    Without replicas it does nothing."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        if request.method in ("GET", "HEAD", "OPTIONS") or not replica_aliases():
            return self.get_response(request)
        wrote = [False]
        token = _request_wrote.set(wrote)
        try:
            response = self.get_response(request)
        finally:
            _request_wrote.reset(token)
        if response.status_code >= 400 or not wrote[0]:
            return response
        scope = rls_scope()
        tenant_id = scope.tenant_id if scope is not None else None
        tenant = getattr(request, "tenant", None)
        if tenant_id is None and tenant is not None:
            tenant_id = tenant.pk
        user = getattr(request, "user", None)
        if tenant_id is not None:
            user_id = user.pk if user is not None and user.is_authenticated else None
            replica_write_mark(tenant_id=tenant_id, user_id=user_id)
        return response
