import django.db.models.deletion
from django.conf import settings
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("knowledge", "0001_initial"),
        ("quality", "0001_initial"),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.AddField(
            model_name="evaluationrun",
            name="pipeline",
            field=models.CharField(default="simple", max_length=50),
        ),
        migrations.CreateModel(
            name="QualityPolicy",
            fields=[
                ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                (
                    "tolerance",
                    models.FloatField(
                        default=0.005,
                        help_text="Largest allowed drop of a judgment list's mean nDCG@10 (absolute, e.g. 0.005).",
                    ),
                ),
                (
                    "tenant",
                    models.OneToOneField(
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="quality_policy",
                        to="knowledge.tenant",
                    ),
                ),
            ],
            options={
                "verbose_name_plural": "quality policies",
                "constraints": [
                    models.CheckConstraint(
                        condition=models.Q(("tolerance__gte", 0)), name="qualitypolicy_tolerance_not_negative"
                    )
                ],
            },
        ),
        migrations.CreateModel(
            name="ConfigChange",
            fields=[
                ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                ("current_config", models.JSONField(blank=True, default=dict)),
                ("proposed_config", models.JSONField(blank=True, default=dict)),
                (
                    "status",
                    models.CharField(
                        choices=[
                            ("pending", "Pending"),
                            ("evaluating", "Evaluating"),
                            ("accepted", "Accepted and applied"),
                            ("refused", "Refused"),
                            ("overridden", "Overridden and applied"),
                            ("applied", "Applied (nothing to evaluate)"),
                            ("failed", "Failed"),
                        ],
                        default="pending",
                        max_length=12,
                    ),
                ),
                ("progress_done", models.PositiveIntegerField(default=0)),
                ("progress_total", models.PositiveIntegerField(default=0)),
                ("deltas", models.JSONField(blank=True, default=dict)),
                ("runs", models.JSONField(blank=True, default=dict)),
                ("tolerance", models.FloatField(default=0.005)),
                ("error", models.TextField(blank=True)),
                ("override_at", models.DateTimeField(blank=True, null=True)),
                ("created_at", models.DateTimeField(auto_now_add=True)),
                ("finished_at", models.DateTimeField(blank=True, null=True)),
                (
                    "override_by",
                    models.ForeignKey(
                        blank=True,
                        null=True,
                        on_delete=django.db.models.deletion.SET_NULL,
                        related_name="+",
                        to=settings.AUTH_USER_MODEL,
                    ),
                ),
                (
                    "requested_by",
                    models.ForeignKey(
                        blank=True,
                        null=True,
                        on_delete=django.db.models.deletion.SET_NULL,
                        related_name="+",
                        to=settings.AUTH_USER_MODEL,
                    ),
                ),
                (
                    "tenant",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="config_changes",
                        to="knowledge.tenant",
                    ),
                ),
            ],
            options={
                "indexes": [models.Index(fields=["tenant", "-created_at"], name="cfgchange_tenant_created_idx")],
                "constraints": [
                    models.CheckConstraint(
                        condition=models.Q(
                            (
                                "status__in",
                                ["pending", "evaluating", "accepted", "refused", "overridden", "applied", "failed"],
                            )
                        ),
                        name="configchange_status_known",
                    ),
                    models.CheckConstraint(
                        condition=models.Q(("tolerance__gte", 0)), name="configchange_tolerance_not_negative"
                    ),
                    models.CheckConstraint(
                        condition=models.Q(("progress_done__lte", models.F("progress_total"))),
                        name="configchange_progress_within_total",
                    ),
                    models.UniqueConstraint(
                        condition=models.Q(("status__in", ["pending", "evaluating"])),
                        fields=("tenant",),
                        name="configchange_one_open_per_tenant",
                    ),
                ],
            },
        ),
    ]
