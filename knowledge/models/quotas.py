"""The quotas' own rows (``knowledge.quotas``): each tenant's limits and the LLM tokens it used.

Both models came from other apps (``core`` and ``retrieval``) with their tables, which keep
their names (``Meta.db_table``) and their row-level security policies.
"""

from __future__ import annotations

from django.db import models
from django.db.models import Q

from core.tenancy import TenantScopedQuerySet


class TenantQuota(models.Model):
    """The operator's limits for one tenant (``knowledge.quotas.limits``): each ``max_*`` left
    empty falls back to the installation's default (``KB_QUOTA_*``; unset there = unlimited).
    Only operators (the superuser, ``manage.py quota``) change it; tenant admins read their usage
    against it."""

    tenant = models.OneToOneField("core.Tenant", on_delete=models.CASCADE, related_name="quota")
    max_documents = models.PositiveBigIntegerField(null=True, blank=True, help_text="Live documents.")
    max_stored_bytes = models.PositiveBigIntegerField(
        null=True, blank=True, help_text="Bytes (UTF-8) of the stored text of every kept version."
    )
    max_chunks = models.PositiveBigIntegerField(null=True, blank=True, help_text="Searchable chunks.")
    max_sources = models.PositiveIntegerField(null=True, blank=True, help_text="Sources of any kind.")
    max_syncs_per_day = models.PositiveIntegerField(null=True, blank=True, help_text="Sync runs in 24 hours.")
    max_llm_tokens_per_day = models.PositiveBigIntegerField(
        null=True, blank=True, help_text="LLM tokens (prompt + completion) in 24 hours."
    )
    updated_at = models.DateTimeField(auto_now=True)

    objects = TenantScopedQuerySet.as_manager()

    class Meta:
        db_table = "core_tenantquota"

    def __str__(self) -> str:
        return f"quota of {self.tenant}"


class LLMUsage(models.Model):
    """The LLM tokens of one call made for a tenant (``llm.metering``): answers (traced or not),
    searches, the quality gate's and evaluations' runs, judgment lists, enrichment, summaries.

    Their sum over the last 24 hours is the tenant's ``llm_tokens_per_day``
    (``knowledge.quotas.usage.llm_tokens_used``). ``purpose`` says what started the call. Pruned
    with the traces (``retrieval.traces.traces_prune``).
    """

    tenant = models.ForeignKey("core.Tenant", on_delete=models.CASCADE, related_name="+")
    purpose = models.CharField(max_length=40)
    tokens_in = models.IntegerField(default=0)
    tokens_out = models.IntegerField(default=0)
    created_at = models.DateTimeField(auto_now_add=True)

    objects = TenantScopedQuerySet.as_manager()

    class Meta:
        db_table = "retrieval_llmusage"
        constraints = [
            models.CheckConstraint(condition=Q(tokens_in__gte=0), name="llmusage_tokens_in_non_negative"),
            models.CheckConstraint(condition=Q(tokens_out__gte=0), name="llmusage_tokens_out_non_negative"),
        ]
        indexes = [
            # ``llm_tokens_used``: a tenant's calls of the last 24 hours.
            models.Index(fields=["tenant", "-created_at"], name="llmusage_tenant_created_idx"),
            # ``traces_prune``: every tenant's records older than the retention period.
            models.Index(fields=["created_at"], name="llmusage_created_idx"),
        ]

    def __str__(self) -> str:
        return f"{self.purpose}: {self.tokens_in + self.tokens_out} tokens"
