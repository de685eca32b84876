"""Every LLM call made for a tenant counts against its daily LLM tokens, whatever started it.

The meter is bound to the code path, not to the client: a service that works for a tenant wraps
its work in ``llm_metered(tenant=..., purpose=...)``, and every call of an ``LLMClient`` inside
it (threads of ``LLMClient.map`` included: they run in a copy of the caller's context) goes
through the bound ``LLMMeter`` in ``llm.client``, the one place where a request leaves:

* before the request, ``check`` refuses it with ``LLMQuotaExceeded`` (an ``LLMError``, so every
  caller that degrades on an LLM failure degrades on this one too: the pipelines' LLM-free
  stages, extractive summaries, enrichment without questions) while the tenant's tokens of the
  last 24 hours have reached its limit; no request is sent;
* after it, ``record`` adds the call's tokens (prompt + completion, also those of a failed
  call that got a reply) to the tenant's usage.

The meter itself (``retrieval.quotas.TenantLLMMeter``: the usage is counted where the answers'
traces live) is built by the factory the retrieval app registers at start-up
(``llm_meter_factory_set``), so a lower layer (``knowledge``'s enrichment and summaries) binds a
meter without importing a higher one. Without a bound meter a call is not metered: operators'
tools (benchmarks, ``manage.py localllm``) and calls for no tenant.
"""

from __future__ import annotations

import contextvars
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Protocol

from llm.errors import LLMError
from llm.usage import Usage


class LLMQuotaExceeded(LLMError):
    """The tenant used its LLM tokens of the last 24 hours: the call was not made (HTTP 429,
    code ``quota_exceeded``; the message gives the figures)."""

    code = "quota_exceeded"
    status = 429


class LLMMeter(Protocol):
    """What ``llm.client`` asks of a bound meter."""

    tenant_id: int
    purpose: str

    def check(self) -> None:
        """``LLMQuotaExceeded`` when the tenant may not make another LLM call now."""

    def record(self, usage: Usage) -> None:
        """Count ``usage`` (one call's tokens) towards the tenant's daily LLM tokens."""

    def flush(self) -> None:
        """Write what ``record`` counted and has not written yet (the block ends)."""


MeterFactory = Callable[..., LLMMeter]

_meter: contextvars.ContextVar[LLMMeter | None] = contextvars.ContextVar("kb_llm_meter", default=None)
_factory: MeterFactory | None = None


def llm_meter_factory_set(factory: MeterFactory | None) -> None:
    """Register how meters are built: ``factory(tenant=, purpose=, record=)`` -> ``LLMMeter``
    (the retrieval app's ``ready``)."""
    global _factory
    _factory = factory


def llm_meter_current() -> LLMMeter | None:
    """The meter bound to this code path, or ``None``."""
    return _meter.get()


@contextmanager
def llm_metered(*, tenant, purpose: str, record: bool = True) -> Iterator[LLMMeter | None]:
    """Meter every LLM call of the block for ``tenant`` (a ``Tenant`` or its id).

    ``purpose`` names what the calls are for ("answer", "search", "evaluation", "judgments",
    "enrichment", "summaries") in the usage records. ``record=False`` checks the limit but leaves
    the counting to the caller: an answer run whose trace records its tokens. Nestable: the
    innermost binding applies, keeping the purpose of an enclosing one for the same tenant (what
    started the work: an evaluation's answers are ``evaluation``). Yields the meter (``None``
    when no factory is registered).
    """
    tenant_id = int(getattr(tenant, "pk", tenant))
    outer = _meter.get()
    if outer is not None and outer.tenant_id == tenant_id:
        purpose = outer.purpose
    meter = _factory(tenant=tenant_id, purpose=purpose, record=record) if _factory is not None else None
    token = _meter.set(meter)
    try:
        yield meter
    finally:
        _meter.reset(token)
        if meter is not None:
            meter.flush()
