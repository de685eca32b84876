"""Sources of a tenant, and deleting a tenant with everything it owns (creating one: ``core.services``)."""

from __future__ import annotations

from django.db import transaction

from core.errors import InvalidInput
from core.models import Tenant
from knowledge.models import Source
from knowledge.vector_index import tenant_vector_indexes_prune


def tenant_delete(*, tenant: Tenant) -> None:
    """Delete a tenant with everything it owns, and drop its own HNSW indexes.

    The rows go in one transaction (cascades; the BM25 triggers update nothing else's
    statistics); the tenant's vector indexes (``knowledge.vector_index``) are dropped after it,
    concurrently when no transaction is open, so other tenants' searches never wait on them.
    """
    tenant_id = tenant.pk
    with transaction.atomic():
        Tenant.objects.filter(pk=tenant_id).delete()
    tenant_vector_indexes_prune(tenant_id=tenant_id)


def source_get_or_create(
    *,
    tenant: Tenant,
    name: str,
    kind: str = Source.Kind.FILES,
    reliability: float | None = None,
    half_life_days: float | None = None,
) -> Source:
    """The tenant's source called ``name``, created if missing; given attributes are updated."""
    if not name.strip():
        raise InvalidInput("A source needs a name.")
    if reliability is not None and not 0 <= reliability <= 1:
        raise InvalidInput("reliability must be in [0, 1].")
    if half_life_days is not None and half_life_days <= 0:
        raise InvalidInput("half_life_days must be positive.")
    source, created = Source.objects.get_or_create(tenant=tenant, name=name, defaults={"kind": kind})
    updates = {
        k: v
        for k, v in {
            "reliability": reliability,
            "half_life_days": half_life_days,
        }.items()
        if v is not None
    }
    if updates:
        for key, value in updates.items():
            setattr(source, key, value)
        source.save(update_fields=list(updates))
    return source
