from django.apps import AppConfig


class CoreConfig(AppConfig):
    """Tenancy (tenants, memberships, membership tokens) and what every other app builds on."""

    name = "core"
    label = "core"
    verbose_name = "Tenancy"

    def ready(self):
        from core.audit import audit_connect

        audit_connect()  # sign-ins and failed sign-ins in the audit log
