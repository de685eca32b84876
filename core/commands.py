"""Shared pieces of the management commands: tenant lookup, domain errors as CLI errors, and the
operator as the actor of what they record in the audit log."""

from __future__ import annotations

from django.core.management.base import BaseCommand, CommandError

from core.audit import OPERATOR_CLI, audit_actor
from core.errors import ApplicationError
from core.models import Membership, Tenant


class TenantCommand(BaseCommand):
    """A command whose ``ApplicationError`` becomes ``CommandError`` (message, non-zero exit), and
    whose audited actions are recorded as the operator's (``core.audit.OPERATOR_CLI``)."""

    def execute(self, *args, **options):
        try:
            with audit_actor(OPERATOR_CLI):
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
