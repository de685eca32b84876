"""``manage.py migrate`` as the tables' owner: Django's command, with "default" connected as
``settings.KB_DATABASE_OWNER`` (``DATABASE_OWNER_URL``; the embedded server's ``postgres``) while
it runs, RunPython steps and post-migrate handlers included. Every other command connects as the
runtime role (``core.db_roles``, docs/deployment.md#database-roles)."""

from django.core.management.commands import migrate

from core.db_roles import owner_connection


class Command(migrate.Command):
    help = migrate.Command.help + " Connects as the tables' owner (DATABASE_OWNER_URL)."

    def handle(self, *args, **options):
        with owner_connection(alias=options["database"]):
            return super().handle(*args, **options)
