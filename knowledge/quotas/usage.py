"""Every quota's usage, counted from the tables themselves, and the checks the services run
before a write.

Usage needs no counters to keep in step, so it is exact whatever path wrote the rows:

* ``documents``: ``knowledge_document`` rows with ``deleted_at`` empty;
* ``stored_bytes``: ``sum(octet_length(text) + original_bytes)`` of ``knowledge_documentversion``
  (every version is kept until its document is deleted; ``octet_length`` reads the stored length
  without decompressing the text; ``original_bytes`` is the size of the files kept for the
  version, ``knowledge.originals``: its original, an office file's pictures; 0 when none is kept);
* ``chunks``: ``knowledge_chunk`` rows of kind ``body`` (current and old versions');
* ``sources``: ``knowledge_source`` rows;
* ``syncs_per_day``: ``knowledge_syncrun`` rows created in the last 24 hours, permission syncs
  of service sources aside (they read no content and run every few minutes) (any trigger or
  outcome: each one cost the server a crawl);
* ``llm_tokens_per_day``: the ``LLMUsage`` rows of the last 24 hours (``llm_tokens_used``; the
  meter, ``knowledge.quotas.meter``, writes one per LLM call).

The first five are counted in one aggregate query (``usage_count``), and only for the quotas
that have a limit when a check runs. ``quota_usage`` gathers all six with their limits
(``QuotaUsage``): the usage API, the portal's sources page, the admin and ``manage.py quota``
show it. The limits, the error and the lock are ``knowledge.quotas.limits``'.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

from django.db import connection
from django.db.models import F, Sum
from django.utils import timezone

from core.models import Membership, Tenant
from knowledge.models import Chunk, Document, DocumentVersion, LLMUsage, Source, SyncRun, TenantQuota
from knowledge.quotas.limits import (
    MB,
    QUOTA_BY_NAME,
    QUOTAS,
    STORED,
    QuotaExceeded,
    quota_limits,
    quota_lock,
    quota_own_limits,
)

DAY = timedelta(hours=24)
# Who may read a tenant's usage (the API, the portal): those who can act on it (delete documents,
# change sources). Not every member: the totals count documents that access rules may hide.
USAGE_ROLES = (Membership.Role.OWNER, Membership.Role.ADMIN)

# One scalar subquery per quota; each takes the tenant id (and the window's start for syncs).
_USAGE_SQL = {
    "documents": f"SELECT count(*) FROM {Document._meta.db_table} WHERE tenant_id = %s AND deleted_at IS NULL",
    "stored_bytes": (
        f"SELECT coalesce(sum(octet_length(text) + original_bytes), 0) FROM {DocumentVersion._meta.db_table}"
        " WHERE tenant_id = %s"
    ),
    "chunks": f"SELECT count(*) FROM {Chunk._meta.db_table} WHERE tenant_id = %s AND kind = 'body'",
    "sources": f"SELECT count(*) FROM {Source._meta.db_table} WHERE tenant_id = %s",
    "syncs_per_day": f"SELECT count(*) FROM {SyncRun._meta.db_table} WHERE tenant_id = %s AND created_at > %s"
    " AND scope <> 'permissions'",
}
KNOWLEDGE_QUOTAS = tuple(_USAGE_SQL)


def usage_count(*, tenant: Tenant | int, names=KNOWLEDGE_QUOTAS, now=None) -> dict[str, int]:
    """``{name: used}`` for the quotas ``names`` (any of ``KNOWLEDGE_QUOTAS``) of ``tenant``, in
    one query: documents and sources as counts, ``stored_bytes`` in bytes (versions' text and
    kept originals), ``syncs_per_day`` as runs created in the 24 hours before ``now`` (default:
    the current time)."""
    names = [name for name in KNOWLEDGE_QUOTAS if name in names]
    if not names:
        return {}
    tenant_id = int(getattr(tenant, "pk", tenant))
    since = (now or timezone.now()) - DAY
    params: list = []
    for name in names:
        params += [tenant_id, since] if name == "syncs_per_day" else [tenant_id]
    sql = "SELECT " + ", ".join(f"({_USAGE_SQL[name]})" for name in names)
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        row = cursor.fetchone()
    return {name: int(value) for name, value in zip(names, row, strict=True)}


def quota_check(
    *, tenant: Tenant | int, documents: int = 0, stored_bytes: int = 0, chunks: int = 0, sources: int = 0
) -> None:
    """Refuse a write that would add ``documents``, ``stored_bytes`` (bytes of version text and
    kept original files),
    ``chunks`` (body chunks) and ``sources`` to ``tenant``'s stored amounts when any of them would
    then pass its limit: ``QuotaExceeded`` (403, code ``quota_exceeded``) naming the first such
    quota with its limit and the amount held. An amount of 0 is not checked, so a write that adds
    nothing of a kind goes through even when the tenant is already over that limit.

    Call it inside the transaction that writes (before the write): it takes the tenant's quota
    lock (``knowledge.quotas.limits.quota_lock``) for the rest of that transaction, so concurrent writers
    check one after another. Outside a transaction it checks without the lock (an early check
    that saves work, to be repeated in the writing transaction). No query when nothing asked
    for has a limit; else the limits and one aggregate query.
    """
    _check(tenant, {"documents": documents, "stored_bytes": stored_bytes, "chunks": chunks, "sources": sources})


def quota_check_early(*, tenant: Tenant | int, **adding: int) -> None:
    """``quota_check`` without the lock, even inside a transaction: an early check before slow
    work (embedding), to be repeated where the rows are written."""
    _check(tenant, adding, lock=False)


def _check(tenant, adding: dict[str, int], *, lock: bool = True) -> None:
    wanted = {name: int(amount) for name, amount in adding.items() if amount and name in STORED}
    if not wanted:
        return
    limits = quota_limits(tenant=tenant)
    limited = [name for name in wanted if limits[name] is not None]
    if not limited:
        return
    if lock:
        quota_lock(tenant=tenant, kind="stored")
    used = usage_count(tenant=tenant, names=limited)
    for name in limited:
        if used[name] + wanted[name] > limits[name]:
            raise QuotaExceeded(quota=QUOTA_BY_NAME[name], limit=limits[name], used=used[name], adding=wanted[name])


def sync_quota_check(*, tenant: Tenant | int) -> None:
    """Refuse one more sync run of ``tenant`` when it has started its limit of runs in the last
    24 hours: ``QuotaExceeded`` (429, code ``quota_exceeded``). Call it in the transaction that
    creates the run (it takes the tenant's sync quota lock until that transaction ends). No
    query beyond the limits when syncs are unlimited."""
    limit = quota_limits(tenant=tenant)["syncs_per_day"]
    if limit is None:
        return
    quota_lock(tenant=tenant, kind="syncs")
    used = usage_count(tenant=tenant, names=["syncs_per_day"])["syncs_per_day"]
    if used + 1 > limit:
        raise QuotaExceeded(quota=QUOTA_BY_NAME["syncs_per_day"], limit=limit, used=used, adding=1)


def sync_quota_exhausted(*, now=None) -> set[int]:
    """Ids of the tenants that have started their limit of syncs in the 24 hours before ``now``
    (default: the current time), across every tenant (for the scheduler: their due syncs wait).
    One query; empty when syncs are unlimited by default and no tenant has a limit of its own."""
    default = QUOTA_BY_NAME["syncs_per_day"].default()
    since = (now or timezone.now()) - DAY
    with connection.cursor() as cursor:
        cursor.execute(
            f"""
            SELECT run.tenant_id
            FROM {SyncRun._meta.db_table} run
            LEFT JOIN {TenantQuota._meta.db_table} quota ON quota.tenant_id = run.tenant_id
            WHERE run.created_at > %s AND run.scope <> 'permissions'
            GROUP BY run.tenant_id, quota.max_syncs_per_day
            HAVING count(*) >= coalesce(quota.max_syncs_per_day, %s)
            """,
            [since, default],
        )
        return {tenant_id for (tenant_id,) in cursor.fetchall()}


@dataclass(frozen=True)
class QuotaUsage:
    """One quota of a tenant: ``name`` (``knowledge.quotas.limits.QUOTAS``), its ``limit``
    (``None`` = unlimited), what is ``used`` (same unit: a count, bytes for ``stored_bytes``, the
    last 24 hours for the per-day ones) and whether the limit is the tenant's ``own`` (else the
    installation default)."""

    name: str
    limit: int | None
    used: int
    own: bool = False

    @property
    def remaining(self) -> int | None:
        """What may still be added: ``limit - used``, at least 0; ``None`` when unlimited."""
        return None if self.limit is None else max(self.limit - self.used, 0)

    @property
    def label(self) -> str:
        """What the quota counts, for people ("Documents", "Syncs (last 24 hours)")."""
        return QUOTA_BY_NAME[self.name].label

    def text(self, value: int | None) -> str:
        """``value`` of this quota for people: "1,234", stored bytes as "677 bytes", "12.5 KB" or
        "3.2 MB" (binary units), ``None`` as "unlimited"."""
        if value is None:
            return "unlimited"
        if self.name != "stored_bytes" or value < 1024:
            return f"{value:,}" + (" bytes" if self.name == "stored_bytes" else "")
        return f"{value / 1024:,.1f} KB" if value < MB else f"{value / MB:,.1f} MB"

    @property
    def used_text(self) -> str:
        return self.text(self.used)

    @property
    def limit_text(self) -> str:
        return self.text(self.limit)

    @property
    def remaining_text(self) -> str:
        return self.text(self.remaining)

    def as_dict(self) -> dict:
        """``{"limit", "used", "remaining"}``: the API's shape of one quota."""
        return {"limit": self.limit, "used": self.used, "remaining": self.remaining}


def llm_tokens_used(*, tenant: Tenant | int, now=None) -> int:
    """LLM tokens (prompt + completion) of ``tenant``'s calls in the 24 hours before ``now``
    (default: the current time): the sum of its ``LLMUsage`` rows, one per metered call (answers,
    traced or not, included). One query on the table's (tenant, created_at) index."""
    since = (now or timezone.now()) - DAY
    tokens = (
        LLMUsage.objects.for_tenant(tenant)
        .filter(created_at__gt=since)
        .aggregate(tokens=Sum(F("tokens_in") + F("tokens_out")))["tokens"]
    )
    return int(tokens or 0)


def quota_usage(*, tenant: Tenant) -> dict[str, QuotaUsage]:
    """``{name: QuotaUsage}`` for every quota of ``tenant``, in ``QUOTAS`` order: three queries
    (the tenant's own limits, the knowledge tables' aggregate, the LLM tokens' sum)."""
    own = quota_own_limits(tenant=tenant)
    used = {**usage_count(tenant=tenant, names=KNOWLEDGE_QUOTAS), "llm_tokens_per_day": llm_tokens_used(tenant=tenant)}
    return {
        q.name: QuotaUsage(name=q.name, limit=q.limit(own[q.name]), used=used[q.name], own=own[q.name] is not None)
        for q in QUOTAS
    }
