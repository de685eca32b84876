"""Tenants, memberships and sources."""

from __future__ import annotations

from django.conf import settings
from django.contrib.auth import get_user_model
from django.db import transaction

from core.errors import InvalidInput
from knowledge.models import (
    Membership,
    Source,
    Tenant,
)
from knowledge.vector_index import tenant_vector_indexes_prune


def tenant_create(*, slug: str, name: str = "", embedder: str | None = None) -> Tenant:
    """Create a tenant; ``InvalidInput`` if the slug is taken or malformed."""
    from django.core.validators import validate_slug

    try:
        validate_slug(slug)
    except Exception as exc:
        raise InvalidInput(f"{slug!r} is not a valid slug (letters, digits, - and _).") from exc
    if Tenant.objects.filter(slug=slug).exists():
        raise InvalidInput(f"Tenant {slug!r} already exists.", code="tenant_exists")
    return Tenant.objects.create(slug=slug, name=name or slug, embedder=embedder or settings.KB_EMBEDDER)


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


def membership_create(*, tenant: Tenant, username: str, password: str, role: str, staff: bool = False):
    """Create (or update) a user with a role in ``tenant``. Returns the user. An existing user
    keeps their memberships in other tenants (one membership per tenant)."""
    if role not in Membership.Role.values:
        raise InvalidInput(f"Unknown role {role!r}; use one of {', '.join(Membership.Role.values)}.")
    User = get_user_model()
    with transaction.atomic():
        user, _ = User.objects.get_or_create(username=username)
        user.set_password(password)
        user.is_staff = staff
        user.save()
        Membership.objects.update_or_create(user=user, tenant=tenant, defaults={"role": role})
    return user


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
