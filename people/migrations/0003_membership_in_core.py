"""Profiles point at ``core.Membership`` (same table, so the database does not change)."""

import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("core", "0001_initial"),
        ("people", "0002_conversations_feedback_history"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.AlterField(
                    model_name="profile",
                    name="membership",
                    field=models.OneToOneField(
                        on_delete=django.db.models.deletion.CASCADE, related_name="profile", to="core.membership"
                    ),
                ),
            ],
        ),
    ]
