"""``TenantQuota`` leaves the core app for ``knowledge`` (state only: the table ``core_tenantquota``
stays, with its row-level-security policy; ``knowledge.0026`` adds it to the knowledge app)."""

from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [
        ("core", "0006_runtime_role"),
        ("knowledge", "0026_quotas_in_knowledge"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(state_operations=[migrations.DeleteModel(name="TenantQuota")]),
    ]
