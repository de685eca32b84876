"""LLM tokens against the tenant's daily quota, and every quota's usage together.

``llm_tokens_per_day`` counts the tokens (prompt + completion) of every LLM call made for the
tenant in the last 24 hours, whatever started it: those of its traced answers, recorded on their
traces (``retrieval.Trace.tokens_in`` + ``tokens_out``, the run's total over its stages), and
those of every other call, one ``retrieval.LLMUsage`` row each (the quality gate's and
evaluations' runs, judgment lists, enrichment, summaries, searches, untraced answers).

``TenantLLMMeter`` is the meter ``llm.metering`` binds to a tenant's work (registered by the
app's ``ready``): every ``LLMClient`` call made inside ``llm_metered`` is refused before it is
sent (``LLMQuotaExceeded``, which every caller degrades on: the pipelines' LLM-free stages,
extractive summaries, enrichment without questions) once the tenant's tokens of the last 24 hours
reached its limit, and is recorded after it. An answer run over the limit does not even start
its LLM stages: ``pipeline_answer`` answers extractively, marked ``degraded`` with a reason that
starts ``quota_exceeded:`` and gives the figures (HTTP 200, as when the LLM endpoint fails;
``docs/quotas.md`` says why). While a tenant has a limit its answers are always traced (unless
the caller asks for no trace), since the trace is their meter. A check reads the usage before its
call, so calls already in flight can take the tenant past the limit by their own tokens.

``quota_usage`` gathers all six quotas (``core.quotas.QUOTAS``) of a tenant: the usage API, the
portal's sources page and ``manage.py quota`` show it. It lives here because this is the lowest
layer that reads both the knowledge tables and the traces.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass, replace
from datetime import timedelta

from django.db.models import F, Sum
from django.utils import timezone

from core.models import Membership, Tenant
from core.quotas import MB, QUOTA_BY_NAME, QUOTAS, QuotaExceeded, quota_limits, quota_own_limits
from core.rls import tenant_context
from knowledge.quotas import KNOWLEDGE_QUOTAS, usage_count
from llm import LLMQuotaExceeded, Usage
from retrieval.models import LLMUsage, Trace

logger = logging.getLogger(__name__)

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
    """LLM tokens (prompt + completion) of ``tenant``'s calls in the 24 hours before ``now``
    (default: the current time): its answer traces' and its ``LLMUsage`` records'. Two sums, each
    on its table's (tenant, created_at) index."""
    since = (now or timezone.now()) - DAY
    tokens = Sum(F("tokens_in") + F("tokens_out"))
    traced = Trace.objects.for_tenant(tenant).filter(created_at__gt=since).aggregate(tokens=tokens)["tokens"]
    other = LLMUsage.objects.for_tenant(tenant).filter(created_at__gt=since).aggregate(tokens=tokens)["tokens"]
    return int(traced or 0) + int(other or 0)


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


class TenantLLMMeter:
    """A tenant's daily LLM tokens as ``llm.metering`` meters them (``llm_meter_for`` builds it).

    ``check`` refuses a call (``LLMQuotaExceeded``, with the figures) once the tokens of the last
    24 hours, with those this meter counted and not written yet, reached the limit: one lookup of
    the limit, and the day's sums when there is one; once refused, the meter refuses every later
    call without asking again. ``record`` counts one call's tokens and writes them as one
    ``LLMUsage`` row (unless ``record`` is false: a traced answer's trace will hold them). Rows
    are written by the thread that bound the meter: a call in another thread (``LLMClient.map``'s
    workers) leaves its row for the next ``record`` there or for ``flush``, which
    ``llm_metered`` calls when its block ends. A failed write is logged, never raised into a call.
    """

    def __init__(self, *, tenant: int, purpose: str, record: bool = True):
        self.tenant_id, self.purpose, self.recording = tenant, purpose, record
        self.refused: LLMQuotaExceeded | None = None
        self._thread = threading.get_ident()
        self._lock = threading.Lock()
        self._pending: list[Usage] = []
        self._unwritten = 0  # tokens counted here and not in the tables yet

    def check(self) -> None:
        if self.refused is None:
            quota = llm_quota_get(tenant=self.tenant_id)
            if quota is not None:
                with self._lock:
                    used = quota.used + self._unwritten
                error = llm_quota_error(replace(quota, used=used))
                if error is not None:
                    self.refused = LLMQuotaExceeded(error.message)
        if self.refused is not None:
            raise LLMQuotaExceeded(self.refused.message)

    def record(self, usage: Usage) -> None:
        with self._lock:
            self._unwritten += max(usage.tokens_in, 0) + max(usage.tokens_out, 0)
            if self.recording:
                self._pending.append(usage)
        if threading.get_ident() == self._thread:
            self.flush()

    def flush(self) -> None:
        """Write the rows counted so far (on the thread that bound the meter)."""
        with self._lock:
            pending, self._pending = self._pending, []
        if not pending:
            return
        rows = [
            LLMUsage(
                tenant_id=self.tenant_id,
                purpose=self.purpose[:40],
                tokens_in=max(usage.tokens_in, 0),
                tokens_out=max(usage.tokens_out, 0),
            )
            for usage in pending
        ]
        try:
            with tenant_context(self.tenant_id):
                LLMUsage.objects.bulk_create(rows)
        except Exception:  # the database's own errors too (row-level security wraps the driver)
            logger.exception("Could not record %s LLM tokens of tenant %s", self.purpose, self.tenant_id)
            return
        with self._lock:
            self._unwritten -= sum(row.tokens_in + row.tokens_out for row in rows)


def llm_meter_for(*, tenant: int, purpose: str, record: bool = True) -> TenantLLMMeter:
    """The meter ``llm.metering.llm_metered`` binds (its factory, set in ``RetrievalConfig.ready``)."""
    return TenantLLMMeter(tenant=tenant, purpose=purpose, record=record)


def quota_usage(*, tenant: Tenant) -> dict[str, QuotaUsage]:
    """``{name: QuotaUsage}`` for every quota of ``tenant``, in ``QUOTAS`` order: three queries
    (the tenant's own limits, the knowledge tables' aggregate, the traces' sum)."""
    own = quota_own_limits(tenant=tenant)
    used = {**usage_count(tenant=tenant, names=KNOWLEDGE_QUOTAS), "llm_tokens_per_day": llm_tokens_used(tenant=tenant)}
    return {
        q.name: QuotaUsage(name=q.name, limit=q.limit(own[q.name]), used=used[q.name], own=own[q.name] is not None)
        for q in QUOTAS
    }
