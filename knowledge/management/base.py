"""Shared pieces of the management commands: tenant lookup and domain errors as CLI errors."""

from __future__ import annotations

from django.core.management.base import BaseCommand, CommandError

from knowledge.errors import ApplicationError
from knowledge.models import Tenant


class KnowledgeCommand(BaseCommand):
    """A command whose ``ApplicationError`` becomes ``CommandError`` (message, non-zero exit)."""

    def execute(self, *args, **options):
        try:
            return super().execute(*args, **options)
        except ApplicationError as exc:
            raise CommandError(exc.message) from exc

    @staticmethod
    def tenant(slug: str) -> Tenant:
        tenant = Tenant.objects.filter(slug=slug).first()
        if tenant is None:
            raise CommandError(f"No tenant {slug!r}; create it with `manage.py createtenant {slug}`.")
        return tenant
