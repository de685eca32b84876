from pathlib import Path

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from retrieval.pipeline import PIPELINE_NAMES
from retrieval.schema import settings_table

DOCS = Path(settings.BASE_DIR) / "docs" / "configuration.md"


class Command(BaseCommand):
    help = "Write docs/configuration.md, the table of a tenant's settings, from the settings schema."

    def add_arguments(self, parser):
        parser.add_argument("--check", action="store_true", help="fail when the committed page differs instead")

    def handle(self, *args, **options):
        text = settings_table(PIPELINE_NAMES)
        if options["check"]:
            if not DOCS.exists() or DOCS.read_text() != text:
                raise CommandError(f"{DOCS} is out of date: run manage.py settings_docs.")
            self.stdout.write(f"{DOCS} is current.")
            return
        DOCS.write_text(text)
        self.stdout.write(f"Wrote {DOCS}.")
