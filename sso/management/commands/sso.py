"""``manage.py sso``: the operator's view and settings of single sign-on (docs/sso.md).

    manage.py sso                                    # the installation's provider and every tenant's
    manage.py sso acme --issuer https://login.acme.example/realms/kb --client-id kb \\
        --client-secret-env ACME_OIDC_SECRET --name "Acme login"
    manage.py sso acme --installation                # acme signs in through the installation's provider
    manage.py sso acme --role-claim realm_access.roles --role kb-admins=admin --role kb-editors=editor \\
        --groups-claim groups --create-memberships on
    manage.py sso acme --allow-other-tenants-members on   # its provider may sign in members of other tenants
    manage.py sso acme --check                       # fetch the provider's discovery document and keys
    manage.py sso acme --remove

The secret is read from an environment variable or standard input, never from the command line
(which other users of the machine may see), and never printed.
"""

from __future__ import annotations

import json
import os
import sys

from django.core.management.base import CommandError

from core.commands import TenantCommand
from core.rls import rls_bypass
from sso.models import TenantSso
from sso.providers import installation_provider, metadata_get, tenant_provider
from sso.services import tenant_sso_remove, tenant_sso_save

_SWITCH = {"on": True, "true": True, "yes": True, "off": False, "false": False, "no": False}


def _switch(value: str) -> bool:
    try:
        return _SWITCH[value.lower()]
    except KeyError:
        raise CommandError(f"{value!r}: use on or off.") from None


def _shown(sso: TenantSso) -> dict:
    return {
        "tenant": sso.tenant.slug,
        "enabled": sso.enabled,
        "name": sso.name,
        "issuer": sso.issuer or None,
        "provider": "installation" if sso.uses_installation_provider else "own",
        "client_id": sso.client_id,
        "client_secret": "stored" if sso.client_secret else None,
        "scopes": sso.scopes,
        "role_claim": sso.role_claim,
        "role_values": sso.role_values,
        "default_role": sso.default_role,
        "groups_claim": sso.groups_claim,
        "create_memberships": sso.create_memberships,
        "allow_other_tenants_members": sso.allow_other_tenants_members,
    }


class Command(TenantCommand):
    help = "Show or set single sign-on: the installation's provider and each tenant's (operators only)."

    def add_arguments(self, parser):
        parser.add_argument("tenant", nargs="?", help="the tenant's slug; none: list every tenant's")
        own = parser.add_mutually_exclusive_group()
        own.add_argument("--issuer", help="the provider's issuer URL (https://...)")
        own.add_argument("--installation", action="store_true", help="use the installation's provider (KB_OIDC_*)")
        parser.add_argument("--client-id")
        secret = parser.add_mutually_exclusive_group()
        secret.add_argument("--client-secret-env", metavar="VAR", help="read the client secret from this variable")
        secret.add_argument("--client-secret-stdin", action="store_true", help="read the client secret from stdin")
        parser.add_argument("--name", help='the button reads "Sign in with NAME"')
        parser.add_argument("--scopes", help="space-separated; must include openid")
        parser.add_argument("--role-claim", help="the claim holding roles or groups (a dotted path); '' for none")
        parser.add_argument(
            "--role", action="append", metavar="VALUE=ROLE", help="map a claim value to a role (repeatable)"
        )
        parser.add_argument("--clear-roles", action="store_true", help="forget every value-to-role mapping first")
        parser.add_argument("--default-role", help="the role when no value matches (default member)")
        parser.add_argument("--groups-claim", help="the claim listing access groups; '' for none")
        parser.add_argument("--create-memberships", metavar="on|off", help="give new members a membership")
        parser.add_argument(
            "--allow-other-tenants-members",
            metavar="on|off",
            help="let the tenant's own provider sign in accounts that are members of other tenants too (default off)",
        )
        parser.add_argument("--enabled", metavar="on|off", help="switch single sign-on on or off")
        parser.add_argument("--remove", action="store_true", help="remove the tenant's single sign-on")
        parser.add_argument("--check", action="store_true", help="fetch the provider's discovery document and JWKS")
        parser.add_argument("--json", action="store_true")

    def handle(self, *args, **options):
        if not options["tenant"]:
            return self._list(options)
        tenant = self.tenant(options["tenant"])
        if options["remove"]:
            tenant_sso_remove(tenant=tenant)
            self.stdout.write(f"Removed the single sign-on of {tenant.slug}.")
            return
        values = self._values(options, tenant)
        secret = self._secret(options)
        if values or secret is not None:
            tenant_sso_save(tenant=tenant, values=values, client_secret=secret)
        sso = TenantSso.objects.for_tenant(tenant).select_related("tenant").first()
        if sso is None:
            raise CommandError(f"{tenant.slug} has no single sign-on; set one with --issuer or --installation.")
        if options["check"]:
            self._check(tenant, sso)
        self._print([_shown(sso)], options)

    def _values(self, options, tenant) -> dict:
        values = {}
        if options["issuer"] is not None:
            values["issuer"] = options["issuer"]
        if options["installation"]:
            values["issuer"] = ""
        for name in ("client_id", "name", "scopes", "role_claim", "default_role", "groups_claim"):
            if options[name] is not None:
                values[name] = options[name]
        for name in ("create_memberships", "allow_other_tenants_members", "enabled"):
            if options[name] is not None:
                values[name] = _switch(options[name])
        if options["role"] or options["clear_roles"]:
            current = TenantSso.objects.for_tenant(tenant).values_list("role_values", flat=True).first() or {}
            roles = {} if options["clear_roles"] else dict(current)
            for pair in options["role"] or []:
                value, sep, role = pair.rpartition("=")
                if not sep or not value:
                    raise CommandError(f"--role {pair!r}: use VALUE=ROLE, e.g. kb-admins=admin.")
                roles[value] = role
            values["role_values"] = roles
        return values

    @staticmethod
    def _secret(options) -> str | None:
        if options["client_secret_env"]:
            value = os.environ.get(options["client_secret_env"], "").strip()
            if not value:
                raise CommandError(f"The variable {options['client_secret_env']} is empty or unset.")
            return value
        if options["client_secret_stdin"]:
            value = sys.stdin.readline().strip()
            if not value:
                raise CommandError("No client secret on standard input.")
            return value
        return None

    def _check(self, tenant, sso: TenantSso) -> None:
        provider = installation_provider() if sso.uses_installation_provider else tenant_provider(slug=tenant.slug)
        if provider is None:
            raise CommandError(
                "Nothing to check: the installation has no provider (KB_OIDC_ISSUER) or this one is off."
            )
        metadata = metadata_get(provider)
        keys = len((metadata.get("jwks") or {}).get("keys") or [])
        self.stderr.write(
            f"{provider.name}: issuer {provider.issuer}, authorization {metadata['authorization_endpoint']}, "
            f"token {metadata['token_endpoint']}, {keys} signing key(s)."
        )

    def _list(self, options) -> None:
        with rls_bypass():  # every tenant's
            rows = [_shown(s) for s in TenantSso.objects.select_related("tenant").order_by("tenant__slug")]
        installation = installation_provider()
        if not options["json"]:
            shown = f"{installation.name} ({installation.issuer})" if installation else "none"
            self.stdout.write(f"installation's provider: {shown}")
        self._print(rows, options, installation=installation)

    def _print(self, rows: list[dict], options, installation=None) -> None:
        if options["json"]:
            out = {"tenants": rows}
            if not options["tenant"]:
                out["installation"] = (
                    {"name": installation.name, "issuer": installation.issuer, "client_id": installation.client_id}
                    if installation
                    else None
                )
            self.stdout.write(json.dumps(out, indent=2))
            return
        for row in rows:
            where = "the installation's provider" if row["provider"] == "installation" else row["issuer"]
            state = "on" if row["enabled"] else "off"
            self.stdout.write(
                f"{row['tenant']}: {state}, {where}, role claim {row['role_claim'] or '-'} {row['role_values']}, "
                f"default {row['default_role']}, groups claim {row['groups_claim'] or '-'}, "
                f"create memberships {'on' if row['create_memberships'] else 'off'}, "
                f"members of other tenants {'allowed' if row['allow_other_tenants_members'] else 'refused'}"
            )
