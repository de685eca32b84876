from django.contrib.auth import get_user_model
from django.core.management.base import CommandError

from core.commands import TenantCommand
from core.memberships import membership_get, membership_token_create


class Command(TenantCommand):
    help = (
        "Make an API token of one membership (requests with it act in that tenant): "
        "manage.py membershiptoken TENANT USERNAME [--name NAME]. Prints the key once."
    )

    def add_arguments(self, parser):
        parser.add_argument("tenant", help="the tenant's slug")
        parser.add_argument("username")
        parser.add_argument("--name", default="", help="what the token is for")

    def handle(self, *args, tenant, username, name, **options):
        tenant = self.tenant(tenant)
        user = get_user_model().objects.filter(username=username).first()
        if user is None:
            raise CommandError(f"No user {username!r}.")
        _, key = membership_token_create(membership=membership_get(user=user, tenant=tenant), name=name)
        self.stdout.write(key)
