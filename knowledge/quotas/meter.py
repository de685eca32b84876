"""The LLM tokens quota at work: the meter every LLM call made for a tenant goes through, and the
check the callers that plan LLM work ask first.

``llm_tokens_per_day`` counts the tokens (prompt + completion) of every LLM call made for the
tenant in the last 24 hours, whatever started it: answers (traced or not), searches, the quality
gate's and evaluations' runs, judgment lists, enrichment, summaries. Each call is one
``knowledge.LLMUsage`` row, written by ``TenantLLMMeter`` and summed by
``knowledge.quotas.usage.llm_tokens_used``.

``TenantLLMMeter`` is the meter ``llm.metering`` binds to a tenant's work (``llm_meter_for`` is
its factory, named in the settings as ``KB_LLM_METER``): every ``LLMClient`` call made inside
``llm_metered`` is refused before it is sent (``LLMQuotaExceeded``, which every caller degrades
on: the pipelines' LLM-free stages, extractive summaries, enrichment without questions) once the
tenant's tokens of the last 24 hours reached its limit, and is recorded after it. An answer run
over the limit does not even start its LLM stages: ``retrieval.pipeline.pipeline_answer`` asks
``llm_quota_get`` and ``llm_quota_error`` first and answers extractively, marked ``degraded``
with a reason that starts ``quota_exceeded:`` and gives the figures (HTTP 200, as when the LLM
endpoint fails; ``docs/quotas.md`` says why). A check reads the usage before its call, so calls
already in flight can take the tenant past the limit by their own tokens.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import replace

from core.models import Tenant
from core.rls import tenant_context
from knowledge.models import LLMUsage
from knowledge.quotas.limits import QUOTA_BY_NAME, QuotaExceeded, quota_limits
from knowledge.quotas.usage import QuotaUsage, llm_tokens_used
from llm import LLMQuotaExceeded, Usage

logger = logging.getLogger(__name__)


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
    the limit, and the day's sum when there is one; once refused, the meter refuses every later
    call without asking again. ``record`` counts one call's tokens and writes them as one
    ``LLMUsage`` row. Rows are written by the thread that bound the meter: a call in another
    thread (``LLMClient.map``'s workers) leaves its row for the next ``record`` there or for
    ``flush``, which ``llm_metered`` calls when its block ends. A failed write is logged, never
    raised into a call.
    """

    def __init__(self, *, tenant: int, purpose: str):
        self.tenant_id, self.purpose = tenant, purpose
        self.refused: LLMQuotaExceeded | None = None
        self._thread = threading.get_ident()
        self._lock = threading.Lock()
        self._pending: list[Usage] = []
        self._unwritten = 0  # tokens counted here and not in the table yet

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


def llm_meter_for(*, tenant: int, purpose: str) -> TenantLLMMeter:
    """The meter ``llm.metering.llm_metered`` binds (its factory, named in the settings as ``KB_LLM_METER``)."""
    return TenantLLMMeter(tenant=tenant, purpose=purpose)
