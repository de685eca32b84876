"""Per-tenant quotas, in one place: what each tenant may keep and use, what it uses, and the
checks that refuse an action over a limit (``docs/quotas.md``).

- ``limits``: the six quotas (``QUOTAS``), each tenant's limits (``quota_limits``: its own
  ``TenantQuota`` value, else the installation's ``KB_QUOTA_*``), ``QuotaExceeded`` (403 for a
  stored amount, 429 for a per-day one), the tenant's quota lock and ``quota_set`` (an
  operator's change, audited);
- ``usage``: every quota's usage counted from the tables (``usage_count``: the knowledge tables
  in one query; ``llm_tokens_used``: the ``LLMUsage`` rows of the day), the checks the services
  run before a write (``quota_check``, ``quota_check_early``, ``sync_quota_check``,
  ``sync_quota_exhausted``) and every quota of a tenant together (``quota_usage``, ``QuotaUsage``);
- ``meter``: the LLM tokens at work: ``TenantLLMMeter``, the meter ``llm.metering`` binds to a
  tenant's work (``llm_meter_for``, named in the settings as ``KB_LLM_METER``), which refuses an LLM
  call over the limit and writes one ``LLMUsage`` row per call; ``llm_quota_get`` and
  ``llm_quota_error`` for callers that plan LLM work (the answer pipeline, judgment lists);
- ``admin``: the superusers' admin of ``TenantQuota`` (registered from ``knowledge.admin``);
- ``apis``: ``GET /api/v1/usage/`` (``UsageApi``, owners and admins).

The models, ``TenantQuota`` and ``LLMUsage``, are in ``knowledge.models.quotas``; the operator's
command is ``manage.py quota`` (``knowledge/management/commands/quota.py``). This lives in the
knowledge app because it is the lowest layer whose services must check quotas before their
writes; the layers above (retrieval, quality, portal, the APIs) import it from here.

The names callers use are re-exported here (``from knowledge.quotas import quota_check``).
"""

from knowledge.quotas.limits import (
    MB,
    QUOTA_BY_NAME,
    QUOTAS,
    Quota,
    QuotaExceeded,
    quota_limits,
    quota_lock,
    quota_set,
)
from knowledge.quotas.meter import TenantLLMMeter, llm_meter_for, llm_quota_error, llm_quota_get
from knowledge.quotas.usage import (
    USAGE_ROLES,
    QuotaUsage,
    llm_tokens_used,
    quota_check,
    quota_check_early,
    quota_usage,
    sync_quota_check,
    sync_quota_exhausted,
    usage_count,
)

__all__ = [
    "MB",
    "QUOTAS",
    "QUOTA_BY_NAME",
    "USAGE_ROLES",
    "Quota",
    "QuotaExceeded",
    "QuotaUsage",
    "TenantLLMMeter",
    "llm_meter_for",
    "llm_quota_error",
    "llm_quota_get",
    "llm_tokens_used",
    "quota_check",
    "quota_check_early",
    "quota_limits",
    "quota_lock",
    "quota_set",
    "quota_usage",
    "sync_quota_check",
    "sync_quota_exhausted",
    "usage_count",
]
