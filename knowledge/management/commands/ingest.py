import json
from pathlib import Path

from celery import current_app
from django.core.management.base import CommandError

from core.commands import TenantCommand
from knowledge.ingestion.readers import SUPPORTED_EXTENSIONS
from knowledge.ingestion.splitters import get_splitter
from knowledge.services import paths_enqueue, paths_ingest, source_get_or_create


class Command(TenantCommand):
    help = (
        "Ingest files or folders: manage.py ingest --tenant SLUG --source NAME PATH... "
        "Runs in-process with a progress bar; with --async and a broker configured (CELERY_BROKER_URL or "
        "REDIS_URL) it validates every file, queues one ingestion job per file for the Celery workers (which "
        "must see the same paths), prints the job ids and exits. --async without a broker says so and "
        "ingests in-process."
    )

    def add_arguments(self, parser):
        parser.add_argument(
            "paths", nargs="+", type=Path, help=f"files or folders of {' '.join(SUPPORTED_EXTENSIONS)} files"
        )
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
        parser.add_argument(
            "--async",
            dest="run_async",
            action="store_true",
            help="queue one ingestion job per file for the workers and print the job ids (needs a broker; "
            "without one, ingests in-process)",
        )
        parser.add_argument("--json", action="store_true", help="print the report (or the queued job ids) as JSON")

    def handle(self, *args, **o):
        tenant = self.tenant(o["tenant"])
        # A new source is saved with the first stored documents (or queued jobs): a refused file leaves none.
        source = source_get_or_create(
            tenant=tenant,
            name=o["source"],
            reliability=o["reliability"],
            half_life_days=o["half_life_days"],
            save=False,
        )
        options = (
            {"max_tokens": o["max_tokens"], "overlap_tokens": o["overlap"]} if o["splitter"] == "max_tokens" else {}
        )
        try:
            splitter = get_splitter(o["splitter"], **options)
        except ValueError as exc:
            raise CommandError(str(exc)) from exc
        reading = {"fmt": o["fmt"], "uri_prefix": o["uri_prefix"], "root": o["root"], "exclude": o["exclude"]}
        if o["run_async"]:
            if not current_app.conf.task_always_eager:
                jobs = paths_enqueue(
                    tenant=tenant,
                    source=source,
                    paths=o["paths"],
                    splitter={"name": o["splitter"], **options},
                    **reading,
                )
                ids = [job.pk for job in jobs]
                if o["json"]:
                    self.stdout.write(json.dumps({"jobs": ids}))
                else:
                    self.stdout.write(
                        f"{source.name}: queued {len(ids)} ingestion job(s): {' '.join(map(str, ids))}. "
                        "Their status is at /api/v1/jobs/<id>/ and in the admin (Ingestion jobs)."
                    )
                return
            self.stderr.write(
                "--async: no broker is configured (CELERY_BROKER_URL or REDIS_URL), so the files are ingested "
                "here instead."
            )
        report = paths_ingest(
            tenant=tenant, source=source, paths=o["paths"], splitter=splitter, progress=not o["json"], **reading
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
