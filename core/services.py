"""Writes to tenancy: tenants and a user's memberships (membership tokens: ``core.memberships``)."""

from __future__ import annotations

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.exceptions import ValidationError
from django.core.validators import validate_slug
from django.db import transaction

from core.embedder_keys import EMBEDDER_FORMS, embedder_key_valid
from core.errors import InvalidInput
from core.memberships import membership_save
from core.models import Membership, Tenant


def tenant_create(*, slug: str, name: str = "", embedder: str | None = None) -> Tenant:
    """Create a tenant; ``InvalidInput`` if the slug is taken or malformed, or ``embedder`` names
    no embedder (``core.embedder_keys``). ``embedder`` defaults to ``KB_EMBEDDER``."""
    try:
        validate_slug(slug)
    except ValidationError as exc:
        raise InvalidInput(f"{slug!r} is not a valid slug (letters, digits, - and _).") from exc
    if embedder is not None and not embedder_key_valid(embedder):
        raise InvalidInput(f"Unknown embedder {embedder!r}; use {EMBEDDER_FORMS}.")
    if Tenant.objects.filter(slug=slug).exists():
        raise InvalidInput(f"Tenant {slug!r} already exists.", code="tenant_exists")
    return Tenant.objects.create(slug=slug, name=name or slug, embedder=embedder or settings.KB_EMBEDDER)


def membership_create(*, tenant: Tenant, username: str, password: str, role: str, staff: bool = False):
    """Create (or update) a user with a role in ``tenant``. Returns the user. An existing user
    keeps their memberships in other tenants (one membership per tenant). The membership is
    recorded in the audit log (``core.memberships.membership_save``). ``InvalidInput`` for an
    unknown role."""
    if role not in Membership.Role.values:
        raise InvalidInput(f"Unknown role {role!r}; use one of {', '.join(Membership.Role.values)}.")
    User = get_user_model()
    with transaction.atomic():
        user, _ = User.objects.get_or_create(username=username)
        user.set_password(password)
        user.is_staff = staff
        user.save()
        membership_save(tenant=tenant, user=user, role=role)
    return user
