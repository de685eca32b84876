"""``manage.py folderroots SLUG [--add DIR] [--remove DIR] [--allow-hard-links DIR]
[--deny-hard-links DIR] [--json]``: the folders a tenant's sources may read
(``knowledge.folder_grants``), and whether files with several hard links (or on another file
system) are read inside one. Run by the operator only: tenant admins have no way to grant
themselves a folder or allow hard links."""

import json

from core.audit import OPERATOR_CLI, audit_actor
from core.commands import TenantCommand
from knowledge.folder_grants import folder_grant_add, folder_grant_hard_links, folder_grant_list, folder_grant_remove


class Command(TenantCommand):
    help = (
        "List the folders granted to a tenant's folder and local git sources, or change them: "
        "`folderroots SLUG --add /srv/handbook --remove /srv/old`. The data directory can never be granted. "
        "Adding a granted folder again pins it to the folder now at its path."
    )

    def add_arguments(self, parser):
        parser.add_argument("tenant", help="the tenant's slug")
        parser.add_argument("--add", action="append", default=[], metavar="DIR", help="grant DIR (repeatable)")
        parser.add_argument("--remove", action="append", default=[], metavar="DIR", help="revoke DIR (repeatable)")
        parser.add_argument(
            "--allow-hard-links",
            action="append",
            default=[],
            metavar="DIR",
            help="read files with several hard links, or on another file system, inside the granted DIR "
            "(skipped by default: such a file may be another tenant's)",
        )
        parser.add_argument(
            "--deny-hard-links", action="append", default=[], metavar="DIR", help="skip them again (the default)"
        )
        parser.add_argument("--json", action="store_true", help="print the grants as JSON")

    def handle(self, *args, **o):
        tenant = self.tenant(o["tenant"])
        with audit_actor(OPERATOR_CLI):
            for path in o["add"]:
                grant, created = folder_grant_add(tenant=tenant, path=path, granted_by=OPERATOR_CLI)
                if not o["json"]:
                    verb = "Granted" if created else "Already granted:"
                    self.stdout.write(f"{verb} {grant.path} to {tenant.slug}.")
            for path in o["remove"]:
                removed = folder_grant_remove(tenant=tenant, path=path)
                if not o["json"]:
                    self.stdout.write(
                        f"Revoked {path} from {tenant.slug}; its sources fail their next sync."
                        if removed
                        else f"{path} was not granted to {tenant.slug}."
                    )
            for path, allowed in [(p, True) for p in o["allow_hard_links"]] + [
                (p, False) for p in o["deny_hard_links"]
            ]:
                grant = folder_grant_hard_links(tenant=tenant, path=path, allowed=allowed)
                if not o["json"]:
                    state = "hard links allowed" if allowed else "hard links skipped"
                    self.stdout.write(f"{grant.path} ({tenant.slug}): {state}.")
        grants = folder_grant_list(tenant=tenant)
        if o["json"]:
            self.stdout.write(
                json.dumps(
                    [
                        {"path": g.path, "granted_by": g.granted_by, "allow_hard_links": g.allow_hard_links}
                        for g in grants
                    ]
                )
            )
        elif not (o["add"] or o["remove"] or o["allow_hard_links"] or o["deny_hard_links"]):
            if not grants:
                self.stdout.write(f"No folder is granted to {tenant.slug}.")
            for grant in grants:
                links = ", hard links allowed" if grant.allow_hard_links else ""
                self.stdout.write(
                    f"{grant.path}  (granted by {grant.granted_by or 'unknown'}, {grant.created_at:%Y-%m-%d}{links})"
                )
