import json
import os

from django.core.management.base import CommandError
from django.db import transaction

from core.audit import OPERATOR_CLI, audit_actor
from core.commands import TenantCommand
from knowledge.connectors.git import location_is_url
from knowledge.folder_grants import folder_grant_add
from knowledge.models import Source
from knowledge.selectors import source_overview_with_last_sync
from knowledge.services.sources import duration_parse, source_create, source_test, source_update
from knowledge.services.sync import source_sync


class Command(TenantCommand):
    help = (
        "Connector sources: `source add --tenant T --name N --kind folder|web|git --location L [--every 1h] "
        "[--include GLOB] [--exclude GLOB]` (a folder, or a git repository on this machine, is granted to the "
        "tenant: `folderroots`); `source add --tenant T --name N --kind slack|confluence|gdrive|github|jira|notion "
        "[--location API_BASE_URL] --secret-env VAR [--options JSON] [--every 1h] [--perm-every 15m] [--sync]`; "
        "`source sync --tenant T --name N [--scope all|content|permissions] [--json]` (runs here and prints "
        "the new/updated/unchanged/deleted/failed counts); `source test --tenant T --name N` (what the "
        "credential sees); `source update --tenant T --name N [--secret-env VAR] [--options JSON] ...`; "
        "`source list --tenant T [--json]`."
    )

    def add_arguments(self, parser):
        actions = parser.add_subparsers(dest="action", required=True, metavar="add|sync|test|update|list")
        add = actions.add_parser("add", help="create a connector source (folder, web, git or a service)")
        add.add_argument("--tenant", required=True)
        add.add_argument("--name", required=True)
        add.add_argument("--kind", required=True, choices=[k.value for k in Source.SYNCED_KINDS])
        add.add_argument(
            "--location",
            default="",
            help="folder: absolute path; web: URL or sitemap.xml; git: URL or path; a service: its API's base URL "
            "(default: the public API, e.g. https://slack.com/api/; Confluence and Jira: your site)",
        )
        add.add_argument(
            "--secret-env", default="", help="a service: the environment variable holding its token or key"
        )
        add.add_argument("--options", default="", help='a service: its options as JSON, e.g. {"channels": ["general"]}')
        add.add_argument("--perm-every", default=None, help="a service: permission sync this often (default 15m)")
        add.add_argument("--branch", default="", help="git: the branch (default: the repository's default)")
        add.add_argument("--every", default=None, help="sync on a schedule, e.g. 30m, 1h, 1d (default: by hand only)")
        add.add_argument("--include", action="append", default=[], help="glob of paths to read (repeatable)")
        add.add_argument("--exclude", action="append", default=[], help="glob of paths to skip (repeatable)")
        add.add_argument(
            "--format", dest="text_format", default="", choices=["", "rst", "md", "txt"], help="how .txt files are read"
        )
        add.add_argument("--uri-prefix", default="", help="folder, git: URI = prefix + document id")
        add.add_argument("--page-limit", type=int, default=500, help="web: at most this many pages per sync")
        add.add_argument("--delay", type=float, default=1.0, help="web: seconds between requests")
        add.add_argument("--sync", action="store_true", help="sync it once right away")
        add.add_argument("--json", action="store_true")
        sync = actions.add_parser("sync", help="sync a source now, in this process")
        sync.add_argument("--tenant", required=True)
        sync.add_argument("--name", required=True)
        sync.add_argument(
            "--scope",
            default="all",
            choices=["all", "content", "permissions"],
            help="a service: content (what changed), permissions (readers, groups, deletions) or both (default)",
        )
        sync.add_argument("--json", action="store_true", help="print the counts as JSON")
        test = actions.add_parser("test", help="a service: say what the source's credential can see")
        test.add_argument("--tenant", required=True)
        test.add_argument("--name", required=True)
        update = actions.add_parser("update", help="change a source's token, options or schedules")
        update.add_argument("--tenant", required=True)
        update.add_argument("--name", required=True)
        update.add_argument("--secret-env", default="", help="read a new token or key from this variable")
        update.add_argument("--options", default=None, help="new options as JSON")
        update.add_argument("--location", default=None)
        update.add_argument("--every", default=None, help="content sync schedule (off: by hand only)")
        update.add_argument("--perm-every", default=None, help="permission sync schedule (off: the default)")
        listing = actions.add_parser("list", help="the tenant's sources with their last sync")
        listing.add_argument("--tenant", required=True)
        listing.add_argument("--json", action="store_true")

    def handle(self, *args, **o):
        tenant = self.tenant(o["tenant"])
        with audit_actor(OPERATOR_CLI):
            getattr(self, f"_{o['action']}")(tenant, o)

    def _grant(self, tenant, o) -> None:
        """The operator adding a folder (or local git) source grants its location to the tenant."""
        location = o["location"].strip()
        if o["kind"] == Source.Kind.WEB or (o["kind"] == Source.Kind.GIT and location_is_url(location)):
            if not location.startswith("file://"):
                return
            location = location.removeprefix("file://")
        grant, created = folder_grant_add(tenant=tenant, path=location, granted_by=OPERATOR_CLI)
        if created and not o["json"]:
            self.stdout.write(
                f"Granted {grant.path} to {tenant.slug} (`manage.py folderroots {tenant.slug}` lists grants)."
            )

    @staticmethod
    def _secret(o) -> str:
        """The token read once from the variable ``--secret-env`` names (``CommandError`` if unset)."""
        name = o.get("secret_env") or ""
        if not name:
            return ""
        value = os.environ.get(name, "")
        if not value.strip():
            raise CommandError(f"--secret-env {name}: the environment variable {name} is not set or is empty.")
        return value.strip()

    @staticmethod
    def _options(o) -> dict | None:
        if o.get("options") in (None, ""):
            return None
        try:
            options = json.loads(o["options"])
        except ValueError as exc:
            raise CommandError(f'--options is JSON, e.g. \'{{"channels": ["general"]}}\': {exc}') from None
        if not isinstance(options, dict):
            raise CommandError('--options is a JSON object, e.g. \'{"channels": ["general"]}\'.')
        return options

    def _add(self, tenant, o):
        duration_parse(o["every"])  # a bad schedule is told before anything is granted
        if o["kind"] in Source.SERVICE_KINDS:
            return self._add_service(tenant, o)
        if not o["location"]:
            raise CommandError(f"A {o['kind']} source needs --location.")
        with transaction.atomic():  # a refused source leaves no grant behind
            self._grant(tenant, o)
            source = self._create(tenant, o)
        if not o["json"]:
            every = f", synced every {source.sync_every}" if source.sync_every else ", synced by hand"
            self.stdout.write(f"Added the {source.kind} source {source.name!r} ({source.location}{every}).")
        if o["sync"]:
            self._report(source_sync(source=source), o)
        elif o["json"]:
            self.stdout.write(json.dumps({"id": source.pk, "name": source.name}))

    def _add_service(self, tenant, o):
        if not o["secret_env"]:
            raise CommandError(f"A {o['kind']} source needs its token or key: --secret-env VARIABLE.")
        source = source_create(
            tenant=tenant,
            name=o["name"],
            kind=o["kind"],
            location=o["location"],
            secret=self._secret(o),
            options=self._options(o) or {},
            sync_every=o["every"],
            perm_every=o["perm_every"],
        )
        if not o["json"]:
            every = f", synced every {source.sync_every}" if source.sync_every else ", synced by hand"
            self.stdout.write(f"Added the {source.kind} source {source.name!r} ({source.location}{every}).")
        if o["sync"]:
            self._report(source_sync(source=source, progress=not o["json"]), o)
        elif o["json"]:
            self.stdout.write(json.dumps({"id": source.pk, "name": source.name}))

    def _source(self, tenant, o) -> Source:
        source = Source.objects.for_tenant(tenant).filter(name=o["name"]).first()
        if source is None:
            raise CommandError(
                f"No source {o['name']!r} in tenant {tenant.slug!r}; `manage.py source list` shows them."
            )
        return source

    def _test(self, tenant, o):
        source = self._source(tenant, o)
        self.stdout.write(f"{source.name}: {source_test(source=source)}")

    def _update(self, tenant, o):
        source = self._source(tenant, o)
        fields = {}
        if o["secret_env"]:
            fields["secret"] = self._secret(o)
        options = self._options(o)
        if options is not None:
            fields["options"] = options
        for name, key in (("location", "location"), ("every", "sync_every"), ("perm_every", "perm_every")):
            if o[name] is not None:
                fields[key] = o[name]
        if not fields:
            raise CommandError("Nothing to change: give --secret-env, --options, --location, --every or --perm-every.")
        source = source_update(source=source, **fields)
        self.stdout.write(f"Changed {source.name}: {', '.join(sorted(fields))}.")

    @staticmethod
    def _create(tenant, o) -> Source:
        return source_create(
            tenant=tenant,
            name=o["name"],
            kind=o["kind"],
            location=o["location"],
            branch=o["branch"],
            include=o["include"],
            exclude=o["exclude"],
            text_format=o["text_format"],
            uri_prefix=o["uri_prefix"],
            page_limit=o["page_limit"],
            crawl_delay_s=o["delay"],
            sync_every=o["every"],
        )

    def _sync(self, tenant, o):
        source = self._source(tenant, o)
        self._report(source_sync(source=source, scope=o["scope"], progress=not o["json"] and source.is_service), o)

    def _report(self, run, o):
        counts = run.counts()
        if o["json"]:
            self.stdout.write(
                json.dumps(
                    {
                        **counts,
                        "status": run.status,
                        "scope": run.scope,
                        "permissions": run.permissions,
                        "errors": run.errors,
                        "error": run.error,
                    }
                )
            )
        elif run.status == run.Status.FAILED:
            self.stderr.write(f"{run.source.name}: the sync failed: {run.error}")
        else:
            seconds = (run.finished_at - run.started_at).total_seconds()
            if not (counts["new"] or counts["updated"] or counts["deleted"] or counts["failed"]):
                self.stdout.write(
                    f"{run.source.name}: nothing new ({counts['unchanged']} unchanged) in {seconds:.1f} s."
                )
            else:
                self.stdout.write(
                    f"{run.source.name}: {counts['new']} new, {counts['updated']} updated, {counts['unchanged']} "
                    f"unchanged, {counts['deleted']} deleted, {counts['failed']} failed in {seconds:.1f} s."
                )
            if run.permissions:
                p = run.permissions
                self.stdout.write(
                    f"  permissions: {p['groups']} groups, {p['public']} documents for the whole tenant, "
                    f"{p['restricted']} restricted, {p['unreadable']} unreadable (admins only); "
                    f"{p['rules_added']} rules added, {p['rules_removed']} removed; "
                    f"{p['source_users_not_members']} source users are not members yet."
                )
            for error in run.errors[:20]:
                self.stderr.write(f"  {error['document']}: {error['error']}")
        if run.status == run.Status.FAILED:
            raise CommandError(run.error)

    def _list(self, tenant, o):
        rows = []
        for source in source_overview_with_last_sync(tenant=tenant):
            last = source.last_sync
            rows.append(
                {
                    "name": source.name,
                    "kind": source.kind,
                    "location": source.location,
                    "sync_every_s": source.sync_every.total_seconds() if source.sync_every else None,
                    "documents": source.document_count,
                    "last_synced_at": source.last_synced_at.isoformat() if source.last_synced_at else None,
                    "last_run": None if last is None else {"status": last.status, **last.counts(), "error": last.error},
                }
            )
        if o["json"]:
            self.stdout.write(json.dumps(rows))
            return
        for row in rows:
            synced = row["last_synced_at"] or "never"
            last = row["last_run"]
            state = (
                "" if last is None else f", last run {last['status']}" + (f": {last['error']}" if last["error"] else "")
            )
            where = f" {row['location']}" if row["location"] else ""
            self.stdout.write(
                f"{row['name']} ({row['kind']}{where}): {row['documents']} documents, synced {synced}{state}"
            )
