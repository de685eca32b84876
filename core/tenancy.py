"""Tenant scoping for ORM reads: the one place where the tenant filter is spelled out."""

from __future__ import annotations

from django.db import models


class TenantScopedQuerySet(models.QuerySet):
    """A queryset whose ``for_tenant`` keeps one tenant's rows.

    ``tenant_path`` is the lookup from the model to its tenant (``"tenant"``, or e.g.
    ``"document__tenant"`` for a model one hop further away).
    """

    tenant_path = "tenant"

    def for_tenant(self, tenant):
        """Rows belonging to ``tenant`` (a ``core.Tenant`` or its id), and no others."""
        tenant_id = tenant if isinstance(tenant, int) else tenant.pk
        return self.filter(**{f"{self.tenant_path}_id": tenant_id})
