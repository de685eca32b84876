import json
from pathlib import Path

from core.commands import TenantCommand
from knowledge.ingestion.splitters import get_splitter
from knowledge.services import paths_ingest, source_get_or_create


class Command(TenantCommand):
    help = "Ingest files or folders: manage.py ingest --tenant SLUG --source NAME PATH..."

    def add_arguments(self, parser):
        parser.add_argument("paths", nargs="+", type=Path)
        parser.add_argument("--tenant", required=True)
        parser.add_argument("--source", required=True, help="source name (created if missing)")
        parser.add_argument(
            "--format",
            dest="fmt",
            choices=["txt", "rst", "md"],
            default=None,
            help="how to read .txt files (rst for Django's docs)",
        )
        parser.add_argument("--exclude", action="append", default=[], help="glob of paths to skip (repeatable)")
        parser.add_argument("--root", type=Path, default=None, help="document ids are paths relative to this folder")
        parser.add_argument("--uri-prefix", default="", help="URI = prefix + document id")
        parser.add_argument("--splitter", default="max_tokens", choices=["max_tokens", "sentence", "single"])
        parser.add_argument("--max-tokens", type=int, default=160)
        parser.add_argument("--overlap", type=int, default=30)
        parser.add_argument("--reliability", type=float, default=None)
        parser.add_argument("--half-life-days", type=float, default=None)
        parser.add_argument("--json", action="store_true", help="print the report as JSON")

    def handle(self, *args, **o):
        tenant = self.tenant(o["tenant"])
        source = source_get_or_create(
            tenant=tenant, name=o["source"], reliability=o["reliability"], half_life_days=o["half_life_days"]
        )
        options = (
            {"max_tokens": o["max_tokens"], "overlap_tokens": o["overlap"]} if o["splitter"] == "max_tokens" else {}
        )
        try:
            splitter = get_splitter(o["splitter"], **options)
        except ValueError as exc:
            from django.core.management.base import CommandError

            raise CommandError(str(exc)) from exc
        report = paths_ingest(
            tenant=tenant,
            source=source,
            paths=o["paths"],
            fmt=o["fmt"],
            uri_prefix=o["uri_prefix"],
            root=o["root"],
            exclude=o["exclude"],
            splitter=splitter,
            progress=not o["json"],
        )
        if o["json"]:
            self.stdout.write(json.dumps(report.as_dict()))
            return
        counts = report.counts()
        self.stdout.write(
            f"{source.name}: {counts['created']} created, {counts['updated']} updated, "
            f"{counts['unchanged']} unchanged, {counts['duplicate']} duplicate; {counts['chunks']} chunks "
            f"in {report.total_seconds:.1f}s (embedding {report.embed_seconds:.1f}s)."
        )
