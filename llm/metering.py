"""Every LLM call made for a tenant counts against its daily LLM tokens, whatever started it.

The meter is bound to the code path, not to the client: a service that works for a tenant wraps
its work in ``llm_metered(tenant=..., purpose=...)``, and every call of an ``LLMClient`` inside
it (threads of ``LLMClient.map`` included: they run in a copy of the caller's context) goes
through the bound ``LLMMeter`` in ``llm.observation``, the one place where a request leaves:

* before the request, ``check`` refuses it with ``LLMQuotaExceeded`` (an ``LLMError``, so every
  caller that degrades on an LLM failure degrades on this one too: the pipelines' LLM-free
  stages, extractive summaries, enrichment without questions) while the tenant's tokens of the
  last 24 hours have reached its limit; no request is sent;
* after it, ``record`` adds the call's tokens (prompt + completion, also those of a failed
  call that got a reply) to the tenant's usage.

The meter itself (``knowledge.quotas.meter.TenantLLMMeter``: one ``LLMUsage`` row per call, the
rows the quota counts) is built by the factory the settings name (``KB_LLM_METER``, a dotted path
imported on first use, the way Django names its middleware), so this layer binds a meter without
importing a higher one and no app changes a global when Django starts. Without a bound meter a
call is not metered: operators' tools (benchmarks, ``manage.py localllm``), calls for no tenant,
and every call when ``KB_LLM_METER`` is empty.
"""

from __future__ import annotations

import contextvars
import functools
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Protocol

from django.conf import settings
from django.utils.module_loading import import_string

from llm.errors import LLMError
from llm.usage import Usage


class LLMQuotaExceeded(LLMError):
    """The tenant used its LLM tokens of the last 24 hours: the call was not made (HTTP 429,
    code ``quota_exceeded``; the message gives the figures)."""

    code = "quota_exceeded"
    status = 429


class LLMMeter(Protocol):
    """What ``llm.observation`` asks of a bound meter."""

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


@functools.cache
def _factory(path: str) -> MeterFactory | None:
    """The meter factory at dotted ``path`` (``KB_LLM_METER``): ``factory(tenant=, purpose=)`` ->
    ``LLMMeter``; ``None`` for an empty path."""
    return import_string(path) if path else None


def llm_meter_current() -> LLMMeter | None:
    """The meter bound to this code path, or ``None``."""
    return _meter.get()


@contextmanager
def llm_metered(*, tenant, purpose: str) -> Iterator[LLMMeter | None]:
    """Meter every LLM call of the block for ``tenant`` (a ``Tenant`` or its id).

    ``purpose`` names what the calls are for ("answer", "search", "evaluation", "judgments",
    "enrichment", "summaries") in the usage records. Nestable: the innermost binding applies,
    keeping the purpose of an enclosing one for the same tenant (what started the work: an
    evaluation's answers are ``evaluation``). Yields the meter (``None`` when ``KB_LLM_METER`` is
    empty).
    """
    tenant_id = int(getattr(tenant, "pk", tenant))
    outer = _meter.get()
    if outer is not None and outer.tenant_id == tenant_id:
        purpose = outer.purpose
    factory = _factory(settings.KB_LLM_METER)
    meter = factory(tenant=tenant_id, purpose=purpose) if factory is not None else None
    token = _meter.set(meter)
    try:
        yield meter
    finally:
        _meter.reset(token)
        if meter is not None:
            meter.flush()
