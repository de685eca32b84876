"""LLM tokens against the tenant's daily quota, and every quota's usage together.

``llm_tokens_per_day`` counts the tokens (prompt + completion) recorded on the tenant's answer
traces (``retrieval.Trace.tokens_in`` + ``tokens_out``, the run's total over its stages) created
in the last 24 hours. An answer run over the limit does not call the LLM: ``pipeline_answer``
answers extractively, marked ``degraded`` with a reason that starts ``quota_exceeded:`` and gives
the figures (HTTP 200, as when the LLM endpoint fails; ``docs/quotas.md`` says why). While a
tenant has a limit its answers are always traced, since the trace is the meter; runs called with
``trace=False`` (evaluations, benchmarks) are neither metered nor limited. The check reads the
usage before the run, so answers already in flight can take the tenant past the limit by their
own tokens.

``quota_usage`` gathers all six quotas (``core.quotas.QUOTAS``) of a tenant: the usage API, the
portal's sources page and ``manage.py quota`` show it. It lives here because this is the lowest
layer that reads both the knowledge tables and the traces.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

from django.db.models import F, Sum
from django.utils import timezone

from core.models import Membership, Tenant
from core.quotas import MB, QUOTA_BY_NAME, QUOTAS, QuotaExceeded, quota_limits, quota_own_limits
from knowledge.quotas import KNOWLEDGE_QUOTAS, usage_count
from retrieval.models import Trace

DAY = timedelta(hours=24)
# Who may read a tenant's usage (the API, the portal): those who can act on it (delete documents,
# change sources). Not every member: the totals count documents that access rules may hide.
USAGE_ROLES = (Membership.Role.OWNER, Membership.Role.ADMIN)


@dataclass(frozen=True)
class QuotaUsage:
    """One quota of a tenant: ``name`` (``core.quotas.QUOTAS``), its ``limit`` (``None`` =
    unlimited), what is ``used`` (same unit: a count, bytes for ``stored_bytes``, the last 24
    hours for the per-day ones) and whether the limit is the tenant's ``own`` (else the
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
    """LLM tokens (prompt + completion) of ``tenant``'s answer traces created in the 24 hours
    before ``now`` (default: the current time). One query on the traces' (tenant, created_at)
    index."""
    since = (now or timezone.now()) - DAY
    total = (
        Trace.objects.for_tenant(tenant)
        .filter(created_at__gt=since)
        .aggregate(tokens=Sum(F("tokens_in") + F("tokens_out")))["tokens"]
    )
    return int(total or 0)


def llm_quota_get(*, tenant: Tenant | int) -> QuotaUsage | None:
    """The tenant's LLM tokens quota with today's usage, or ``None`` when it is unlimited (then
    without counting anything)."""
    limit = quota_limits(tenant=tenant)["llm_tokens_per_day"]
    if limit is None:
        return None
    return QuotaUsage(name="llm_tokens_per_day", limit=limit, used=llm_tokens_used(tenant=tenant))


def llm_quota_error(usage: QuotaUsage) -> QuotaExceeded | None:
    """The ``QuotaExceeded`` (429) of a tenant whose LLM tokens of the last 24 hours reached the
    limit, else ``None``."""
    if usage.limit is None or usage.used < usage.limit:
        return None
    return QuotaExceeded(quota=QUOTA_BY_NAME[usage.name], limit=usage.limit, used=usage.used)


def quota_usage(*, tenant: Tenant) -> dict[str, QuotaUsage]:
    """``{name: QuotaUsage}`` for every quota of ``tenant``, in ``QUOTAS`` order: three queries
    (the tenant's own limits, the knowledge tables' aggregate, the traces' sum)."""
    own = quota_own_limits(tenant=tenant)
    used = {**usage_count(tenant=tenant, names=KNOWLEDGE_QUOTAS), "llm_tokens_per_day": llm_tokens_used(tenant=tenant)}
    return {
        q.name: QuotaUsage(name=q.name, limit=q.limit(own[q.name]), used=used[q.name], own=own[q.name] is not None)
        for q in QUOTAS
    }
