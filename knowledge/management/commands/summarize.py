import json

from core.commands import TenantCommand
from knowledge.summaries.services import METHODS, summaries_refresh, summaries_setting


class Command(TenantCommand):
    help = (
        "Write the per-document summaries an existing tenant lacks (docs/summaries.md): "
        "manage.py summarize SLUG [--method auto|extractive|llm] [--rebuild]. Prints the counts as JSON."
    )

    def add_arguments(self, parser):
        parser.add_argument("slug")
        parser.add_argument(
            "--method",
            choices=[m for m in METHODS if m != "off"],
            default=None,
            help="Default: the tenant's 'summaries' setting, else KB_SUMMARIES; 'off' there still runs 'auto'.",
        )
        parser.add_argument(
            "--rebuild", action="store_true", help="Rewrite existing summaries of current versions too."
        )

    def handle(self, *args, slug, method, rebuild, **options):
        tenant = self.tenant(slug)
        if method is None:
            method = summaries_setting(tenant)
            method = "auto" if method == "off" else method
        counts = summaries_refresh(tenant_id=tenant.pk, method=method, rebuild=rebuild)
        self.stdout.write(json.dumps(counts))
