"""``manage.py mcp --token KEY``: the MCP server on stdin/stdout for a desktop assistant (docs/mcp.md)."""

from __future__ import annotations

import os

from django.core.management.base import BaseCommand, CommandError

from core.errors import ApplicationError
from mcp_server.auth import token_for_key
from mcp_server.stdio import stdio_serve

TOKEN_VARIABLE = "KB_MCP_TOKEN"


class Command(BaseCommand):
    help = (
        "Serve the knowledge base as an MCP server over stdio, as the member of a membership token "
        f"(--token, or the {TOKEN_VARIABLE} environment variable, which keeps it out of the process list)."
    )
    requires_system_checks: list = []  # stdout is the protocol: nothing but JSON-RPC may reach it

    def add_arguments(self, parser):
        parser.add_argument("--token", help=f"A membership token (kbm_…); default: ${TOKEN_VARIABLE}.")

    def handle(self, *args, **options):
        key = options["token"] or os.environ.get(TOKEN_VARIABLE, "")
        if not key:
            raise CommandError(f"Give a membership token: --token KEY or {TOKEN_VARIABLE}=KEY.")
        try:
            token = token_for_key(key)
        except ApplicationError as exc:
            raise CommandError(exc.message) from exc
        membership = token.membership
        self.stderr.write(
            f"MCP server on stdio for {membership.user.get_username()} in tenant {membership.tenant.slug}."
        )
        stdio_serve(key=key)
