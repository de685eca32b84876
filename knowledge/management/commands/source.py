import json

from django.core.management.base import CommandError
from django.db import transaction

from core.audit import OPERATOR_CLI, audit_actor
from core.commands import TenantCommand
from knowledge.connectors.git import location_is_url
from knowledge.folder_grants import folder_grant_add
from knowledge.models import Source
from knowledge.selectors import source_overview_with_last_sync
from knowledge.services.sources import duration_parse, source_create
from knowledge.services.sync import source_sync


class Command(TenantCommand):
    help = (
        "Connector sources: `source add --tenant T --name N --kind folder|web|git --location L [--every 1h] "
        "[--include GLOB] [--exclude GLOB]` (a folder, or a git repository on this machine, is granted to the "
        "tenant: `folderroots`), `source sync --tenant T --name N [--json]` (runs here and prints "
        "the new/updated/unchanged/deleted/failed counts), `source list --tenant T [--json]`."
    )

    def add_arguments(self, parser):
        actions = parser.add_subparsers(dest="action", required=True, metavar="add|sync|list")
        add = actions.add_parser("add", help="create a folder, web or git source")
        add.add_argument("--tenant", required=True)
        add.add_argument("--name", required=True)
        add.add_argument("--kind", required=True, choices=[k.value for k in Source.SYNCED_KINDS])
        add.add_argument(
            "--location", required=True, help="folder: absolute path; web: URL or sitemap.xml; git: URL or path"
        )
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
        sync.add_argument("--json", action="store_true", help="print the counts as JSON")
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

    def _add(self, tenant, o):
        duration_parse(o["every"])  # a bad schedule is told before anything is granted
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
        source = Source.objects.for_tenant(tenant).filter(name=o["name"]).first()
        if source is None:
            raise CommandError(
                f"No source {o['name']!r} in tenant {tenant.slug!r}; `manage.py source list` shows them."
            )
        self._report(source_sync(source=source), o)

    def _report(self, run, o):
        counts = run.counts()
        if o["json"]:
            self.stdout.write(json.dumps({**counts, "status": run.status, "errors": run.errors, "error": run.error}))
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
