from django.apps import AppConfig


class CoreConfig(AppConfig):
    """Tenancy (tenants, memberships, membership tokens) and what every other app builds on."""

    name = "core"
    label = "core"
    verbose_name = "Tenancy"

    def ready(self):
        from django.core import checks

        from core.audit import audit_connect
        from core.db_roles import database_roles_check
        from core.secrets import secret_keys_check, secret_keys_deploy_check

        audit_connect()  # sign-ins and failed sign-ins in the audit log
        # manage.py check --deploy: the app must not connect as a superuser or an owner (core.db_roles)
        checks.register(database_roles_check, checks.Tags.security, checks.Tags.database, deploy=True)
        # Stored secrets' keys (core.secrets): a malformed key is an error; none of their own warns at deploy.
        checks.register(secret_keys_check, checks.Tags.security)
        checks.register(secret_keys_deploy_check, checks.Tags.security, deploy=True)
