"""The quotas' limits: what each quota is, each tenant's limit, the error an action over one
raises, the quota lock, and setting a tenant's own limits.

Six quotas (``QUOTAS``), each a limit and a usage (``docs/quotas.md``; the usage is counted in
``knowledge.quotas.usage``):

* ``documents``: live documents (not deleted at their source);
* ``stored_bytes``: bytes (UTF-8) of the text of every stored version of every document, plus
  the kept original files of those versions (``knowledge.originals``);
* ``chunks``: body chunks of every stored version (summary chunks are not counted);
* ``sources``: sources of any kind;
* ``syncs_per_day``: sync runs started in the last 24 hours;
* ``llm_tokens_per_day``: LLM tokens (prompt + completion) of every LLM call made for the tenant
  in the last 24 hours, whatever started it (``llm.metering``, ``knowledge.quotas.meter``).

An action over a stored amount's limit is refused with 403, a sync over the day's with 429
(``QuotaExceeded``); over the LLM tokens' limit no LLM call is made: a question is answered
without the LLM, other work degrades or is refused (``knowledge.quotas.meter``).

A tenant's limit is its ``knowledge.TenantQuota`` field when set, else the installation default
(``KB_QUOTA_*``, ``None`` = unlimited).

Checks that guard a write run inside the write's transaction under the tenant's quota lock
(``quota_lock``, a transaction-level advisory lock), so two concurrent writers cannot both take
the last unit: the second waits for the first to commit and then counts its rows.
"""

from __future__ import annotations

from dataclasses import dataclass

from django.conf import settings
from django.db import connection, models, transaction

from core.audit import audit_record
from core.errors import ApplicationError, InvalidInput
from core.models import Tenant
from knowledge.models import TenantQuota

MB = 1024 * 1024


@dataclass(frozen=True)
class Quota:
    """One kind of limit: ``name`` (the API's key), the ``TenantQuota`` ``field``, the installation
    default's ``setting`` (and its ``scale``: bytes per unit of the setting), whether it counts
    the last 24 hours (``per_day``) and the words its messages use."""

    name: str
    field: str
    setting: str
    label: str
    noun: str
    one: str  # the noun for one ("document")
    per_day: bool = False
    scale: int = 1

    def default(self) -> int | None:
        """The installation default (``None`` = unlimited), in the quota's unit."""
        value = getattr(settings, self.setting)
        return None if value is None else int(value) * self.scale

    def amount(self, number: int) -> str:
        """``number`` with its noun: "1 document", "1,000 documents"."""
        return f"{number:,} {self.one if number == 1 else self.noun}"

    def limit(self, own: int | None) -> int | None:
        """The limit that applies: the tenant's ``own`` value when set, else ``default()``."""
        return own if own is not None else self.default()


QUOTAS: tuple[Quota, ...] = (
    Quota("documents", "max_documents", "KB_QUOTA_DOCUMENTS", "Documents", "documents", "document"),
    Quota(
        "stored_bytes",
        "max_stored_bytes",
        "KB_QUOTA_STORED_MB",
        "Stored text",
        "bytes of stored text",
        "byte of stored text",
        scale=MB,
    ),
    Quota("chunks", "max_chunks", "KB_QUOTA_CHUNKS", "Chunks", "chunks", "chunk"),
    Quota("sources", "max_sources", "KB_QUOTA_SOURCES", "Sources", "sources", "source"),
    Quota(
        "syncs_per_day",
        "max_syncs_per_day",
        "KB_QUOTA_SYNCS_PER_DAY",
        "Syncs (last 24 hours)",
        "syncs",
        "sync",
        per_day=True,
    ),
    Quota(
        "llm_tokens_per_day",
        "max_llm_tokens_per_day",
        "KB_QUOTA_LLM_TOKENS_PER_DAY",
        "LLM tokens (last 24 hours)",
        "LLM tokens",
        "LLM token",
        per_day=True,
    ),
)
QUOTA_BY_NAME: dict[str, Quota] = {quota.name: quota for quota in QUOTAS}
# What the stored amounts' checks cover (``knowledge.quotas.usage.quota_check``).
STORED = ("documents", "stored_bytes", "chunks", "sources")


class QuotaExceeded(ApplicationError):
    """An action would take the tenant past one of its quotas (code ``quota_exceeded``).

    ``status`` is 403 for a stored amount (documents, stored bytes, chunks, sources: retrying
    does not help until something is deleted or the limit is raised) and 429 for a per-day
    amount (syncs, LLM tokens: it frees up as the 24-hour window moves on). ``quota``, ``limit``,
    ``used`` and ``adding`` are the figures the message gives.
    """

    code = "quota_exceeded"
    status = 403

    def __init__(self, *, quota: Quota, limit: int, used: int, adding: int = 0):
        self.quota, self.limit, self.used, self.adding = quota, limit, used, adding
        super().__init__(quota_message(quota, limit=limit, used=used, adding=adding))
        self.status = 429 if quota.per_day else 403


def quota_message(quota: Quota, *, limit: int, used: int, adding: int = 0) -> str:
    """The sentence a ``QuotaExceeded`` says, with the figures, e.g. "This tenant may keep 1,000
    documents and has 1,000; ask the operator to raise the limit."."""
    if quota.per_day:
        verb = "use" if quota.name == "llm_tokens_per_day" else "run"
        done = "used" if quota.name == "llm_tokens_per_day" else "run"
        return (
            f"This tenant may {verb} {quota.amount(limit)} a day and has {done} {used:,} in the last 24 hours; "
            "try again later or ask the operator to raise the limit."
        )
    more = f"; this would add {adding:,}" if adding and used < limit else ""
    return f"This tenant may keep {quota.amount(limit)} and has {used:,}{more}; ask the operator to raise the limit."


def quota_limits(*, tenant: Tenant | int) -> dict[str, int | None]:
    """``{name: limit}`` for every quota of ``tenant`` (a ``Tenant`` or its id): the tenant's own
    ``TenantQuota`` value when set, else the installation default; ``None`` = unlimited. One
    query (the tenant's ``TenantQuota`` row, if any)."""
    own = quota_own_limits(tenant=tenant)
    return {q.name: q.limit(own[q.name]) for q in QUOTAS}


def quota_own_limits(*, tenant: Tenant | int) -> dict[str, int | None]:
    """``{name: value}`` of the tenant's own ``TenantQuota`` fields (``None``: not set, the
    installation default applies)."""
    tenant_id = getattr(tenant, "pk", tenant)
    own = TenantQuota.objects.filter(tenant_id=tenant_id).values(*(q.field for q in QUOTAS)).first() or {}
    return {q.name: own.get(q.field) for q in QUOTAS}


# Transaction-level advisory locks, two integer keys: (this namespace + kind, tenant id).
_LOCK_NAMESPACE = 0x6B_7100  # "kq"
_LOCK_KINDS = {"stored": 1, "syncs": 2}


def quota_lock(*, tenant: Tenant | int, kind: str = "stored") -> None:
    """Hold the tenant's quota lock of ``kind`` (``"stored"`` amounts or ``"syncs"``) until the
    current transaction ends, so a check and the write it guards run one writer at a time per
    tenant. Outside a transaction it does nothing (the lock would end with the statement)."""
    if not connection.in_atomic_block:
        return
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_advisory_xact_lock(%s, %s)", quota_lock_key(tenant=tenant, kind=kind))


def quota_lock_key(*, tenant: Tenant | int, kind: str = "stored") -> tuple[int, int]:
    """The two int4 keys of the tenant's quota lock of ``kind`` (``pg_advisory_xact_lock(a, b)``).
    A tenant id past 2**31 shares its lock with a smaller one (harmless: they wait on each other)."""
    return (_LOCK_NAMESPACE + _LOCK_KINDS[kind], int(getattr(tenant, "pk", tenant)) & 0x7FFF_FFFF)


def quota_parse(name: str, value: str | int | None) -> int | None:
    """A limit as an operator writes it: a whole number of at least 0 (in the quota's unit), or
    ``None`` (the installation default). ``InvalidInput`` otherwise."""
    if value is None or (isinstance(value, str) and value.strip().lower() in ("", "default")):
        return None
    if isinstance(value, bool):
        raise InvalidInput(f"{name}: {value!r} is not a whole number.")
    try:
        number = int(str(value).strip().replace("_", "").replace(",", ""))
    except ValueError:
        raise InvalidInput(f"{name}: {value!r} is not a whole number (or 'default').") from None
    if number < 0:
        raise InvalidInput(f"{name}: the limit is 0 or more, not {number}.")
    if number > FIELD_MAX[name]:
        raise InvalidInput(f"{name}: the limit is at most {FIELD_MAX[name]:,}.")
    return number


# The largest value each TenantQuota field holds (PositiveIntegerField or PositiveBigIntegerField).
FIELD_MAX = {
    q.name: 2**63 - 1 if isinstance(TenantQuota._meta.get_field(q.field), models.PositiveBigIntegerField) else 2**31 - 1
    for q in QUOTAS
}


def quota_set(*, tenant: Tenant, limits: dict[str, int | None]) -> dict[str, list]:
    """Set the tenant's own limits: ``limits`` maps quota names (``QUOTAS``) to a whole number of
    at least 0 (in the quota's unit: bytes for ``stored_bytes``) or ``None`` (the installation
    default applies). Quotas not named keep their value. Every change is recorded in the audit
    log as ``quota.changed`` with ``{field: [before, after]}``. Returns those changes (empty:
    nothing changed, nothing recorded). ``InvalidInput`` for an unknown name or a bad value.
    """
    unknown = sorted(set(limits) - set(QUOTA_BY_NAME))
    if unknown:
        raise InvalidInput(f"Unknown quota(s): {', '.join(unknown)}; use {', '.join(QUOTA_BY_NAME)}.")
    values = {name: quota_parse(name, value) for name, value in limits.items()}
    with transaction.atomic():
        quota, _ = TenantQuota.objects.select_for_update().get_or_create(tenant=tenant)
        before = {name: getattr(quota, QUOTA_BY_NAME[name].field) for name in values}
        for name, value in values.items():
            setattr(quota, QUOTA_BY_NAME[name].field, value)
        changes = {
            QUOTA_BY_NAME[name].field: [before[name], value] for name, value in values.items() if before[name] != value
        }
        if changes:
            quota.save()
            quota_change_record(quota=quota, changes=changes)
    return changes


def quota_change_record(*, quota: TenantQuota, changes: dict[str, list]) -> None:
    """Record ``changes`` (``{field: [before, after]}``) of ``quota`` in the audit log as
    ``quota.changed`` (whoever acts: the request's user, the CLI's operator)."""
    audit_record(action="quota.changed", tenant=quota.tenant_id, obj=quota, changes=changes)
