"""Shared pieces of the management commands: tenant lookup and domain errors as CLI errors."""

from __future__ import annotations

from django.core.management.base import BaseCommand, CommandError

from core.errors import ApplicationError
from core.models import Membership, Tenant


class TenantCommand(BaseCommand):
    """A command whose ``ApplicationError`` becomes ``CommandError`` (message, non-zero exit)."""

    def execute(self, *args, **options):
        try:
            return super().execute(*args, **options)
        except ApplicationError as exc:
            raise CommandError(exc.message) from exc

    @staticmethod
    def tenant(slug: str):
        """The ``core.Tenant`` with ``slug``; ``CommandError`` naming the fix if there is none."""
        tenant = Tenant.objects.filter(slug=slug).first()
        if tenant is None:
            raise CommandError(f"No tenant {slug!r}; create it with `manage.py createtenant {slug}`.")
        return tenant

    @staticmethod
    def member(tenant, username: str | None):
        """The user ``username`` if they are a member of ``tenant`` (``None`` for no username);
        ``CommandError`` otherwise."""
        if not username:
            return None
        membership = (
            Membership.objects.for_tenant(tenant).select_related("user").filter(user__username=username).first()
        )
        if membership is None:
            raise CommandError(f"No member {username!r} in tenant {tenant.slug!r}.")
        return membership.user
