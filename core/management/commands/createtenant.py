from core.commands import TenantCommand
from core.services import tenant_create


class Command(TenantCommand):
    help = "Create a tenant: manage.py createtenant SLUG [--name NAME]"

    def add_arguments(self, parser):
        parser.add_argument("slug")
        parser.add_argument("--name", default="")
        parser.add_argument(
            "--embedder", default=None, help="'local', 'mpnet' or 'openai:<model>' (default KB_EMBEDDER)"
        )

    def handle(self, *args, slug, name, embedder, **options):
        tenant = tenant_create(slug=slug, name=name, embedder=embedder)
        self.stdout.write(f"Created tenant {tenant.slug} (embedder {tenant.embedder}).")
