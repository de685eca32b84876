import argparse
import json

from core.commands import TenantCommand
from knowledge.enrichment.services import chunks_enrich


class Command(TenantCommand):
    help = (
        "(Re)enrich a tenant's current chunks: keyphrases, named entities when the tenant's "
        "enrichment_entities switch is on, and questions when an LLM is configured (docs/enrichment.md). "
        "manage.py enrich SLUG [--force] [--no-questions] [--entities | --no-entities]"
    )

    def add_arguments(self, parser):
        parser.add_argument("slug")
        parser.add_argument("--force", action="store_true", help="replace existing enrichments too")
        parser.add_argument("--no-questions", action="store_true", help="keyphrases only, even with an LLM")
        parser.add_argument(
            "--entities",
            action=argparse.BooleanOptionalAction,
            default=None,
            help="named entities or none (default: the tenant's enrichment_entities setting, else KB_ENRICHMENT_ENTITIES)",
        )

    def handle(self, *args, slug, force, no_questions, entities, **options):
        tenant = self.tenant(slug)
        summary = chunks_enrich(
            tenant_id=tenant.pk, force=force, entities=entities, **({"llm": None} if no_questions else {})
        )
        self.stdout.write(json.dumps(summary))
