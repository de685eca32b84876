"""Quality rows point at ``core.Tenant`` (same table, so the database does not change)."""

import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("core", "0001_initial"),
        ("quality", "0003_judgment_generation"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.AlterField(
                    model_name="configchange",
                    name="tenant",
                    field=models.ForeignKey(
                        on_delete=django.db.models.deletion.CASCADE, related_name="config_changes", to="core.tenant"
                    ),
                ),
                migrations.AlterField(
                    model_name="evaluationrun",
                    name="tenant",
                    field=models.ForeignKey(
                        blank=True,
                        null=True,
                        on_delete=django.db.models.deletion.SET_NULL,
                        related_name="evaluation_runs",
                        to="core.tenant",
                    ),
                ),
                migrations.AlterField(
                    model_name="judgmentgeneration",
                    name="tenant",
                    field=models.ForeignKey(
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="judgment_generations",
                        to="core.tenant",
                    ),
                ),
                migrations.AlterField(
                    model_name="judgmentlist",
                    name="tenant",
                    field=models.ForeignKey(
                        on_delete=django.db.models.deletion.CASCADE, related_name="judgment_lists", to="core.tenant"
                    ),
                ),
                migrations.AlterField(
                    model_name="qualitypolicy",
                    name="tenant",
                    field=models.OneToOneField(
                        on_delete=django.db.models.deletion.CASCADE, related_name="quality_policy", to="core.tenant"
                    ),
                ),
            ],
        ),
    ]
