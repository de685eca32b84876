"""Retrieval rows point at ``core.Tenant`` (same table, so the database does not change)."""

import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("core", "0001_initial"),
        ("retrieval", "0005_citation_opens"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.AlterField(
                    model_name="citationopen",
                    name="tenant",
                    field=models.ForeignKey(
                        on_delete=django.db.models.deletion.CASCADE, related_name="citation_opens", to="core.tenant"
                    ),
                ),
                migrations.AlterField(
                    model_name="conversation",
                    name="tenant",
                    field=models.ForeignKey(
                        on_delete=django.db.models.deletion.CASCADE, related_name="conversations", to="core.tenant"
                    ),
                ),
                migrations.AlterField(
                    model_name="feedback",
                    name="tenant",
                    field=models.ForeignKey(
                        on_delete=django.db.models.deletion.CASCADE, related_name="feedback", to="core.tenant"
                    ),
                ),
                migrations.AlterField(
                    model_name="trace",
                    name="tenant",
                    field=models.ForeignKey(
                        on_delete=django.db.models.deletion.CASCADE, related_name="traces", to="core.tenant"
                    ),
                ),
            ],
        ),
    ]
