"""Tenancy moves from the knowledge app to core: the models are taken over in the migration state
only; their tables (``knowledge_tenant``, ``knowledge_membership``, ``knowledge_membershiptoken``)
were made by the knowledge app's migrations and keep their names, rows and policies."""

import django.db.models.deletion
from django.conf import settings
from django.db import migrations, models


class Migration(migrations.Migration):
    initial = True

    dependencies = [
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
        ("knowledge", "0016_enrichment_current"),  # the tables
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.CreateModel(
                    name="Tenant",
                    fields=[
                        (
                            "id",
                            models.BigAutoField(
                                auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                            ),
                        ),
                        ("slug", models.SlugField(max_length=64, unique=True)),
                        ("name", models.CharField(max_length=200)),
                        (
                            "embedder",
                            models.CharField(
                                default="local",
                                help_text="'local' (all-MiniLM-L6-v2) or 'openai:<model>'. Changing it needs a re-embed.",
                                max_length=200,
                            ),
                        ),
                        (
                            "retrieval_config",
                            models.JSONField(
                                blank=True,
                                default=dict,
                                help_text='Overrides of retrieval defaults, e.g. {"fusion": "weighted", "dense_weight": 0.7}.',
                            ),
                        ),
                        ("created_at", models.DateTimeField(auto_now_add=True)),
                    ],
                    options={
                        "db_table": "knowledge_tenant",
                    },
                ),
                migrations.CreateModel(
                    name="Membership",
                    fields=[
                        (
                            "id",
                            models.BigAutoField(
                                auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                            ),
                        ),
                        (
                            "role",
                            models.CharField(
                                choices=[
                                    ("owner", "Owner"),
                                    ("admin", "Admin"),
                                    ("editor", "Editor"),
                                    ("member", "Member"),
                                    ("viewer", "Viewer"),
                                ],
                                default="member",
                                max_length=10,
                            ),
                        ),
                        (
                            "user",
                            models.ForeignKey(
                                on_delete=django.db.models.deletion.CASCADE,
                                related_name="memberships",
                                to=settings.AUTH_USER_MODEL,
                            ),
                        ),
                        (
                            "tenant",
                            models.ForeignKey(
                                on_delete=django.db.models.deletion.CASCADE,
                                related_name="memberships",
                                to="core.tenant",
                            ),
                        ),
                    ],
                    options={
                        "db_table": "knowledge_membership",
                    },
                ),
                migrations.CreateModel(
                    name="MembershipToken",
                    fields=[
                        (
                            "id",
                            models.BigAutoField(
                                auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                            ),
                        ),
                        (
                            "name",
                            models.CharField(
                                blank=True, help_text="What the token is for (a script, a bot).", max_length=100
                            ),
                        ),
                        ("digest", models.CharField(editable=False, max_length=64, unique=True)),
                        (
                            "prefix",
                            models.CharField(
                                editable=False, help_text="The key's first characters, to recognize it.", max_length=12
                            ),
                        ),
                        ("created_at", models.DateTimeField(auto_now_add=True)),
                        ("last_used_at", models.DateTimeField(blank=True, editable=False, null=True)),
                        (
                            "membership",
                            models.ForeignKey(
                                on_delete=django.db.models.deletion.CASCADE, related_name="tokens", to="core.membership"
                            ),
                        ),
                    ],
                    options={
                        "db_table": "knowledge_membershiptoken",
                    },
                ),
                migrations.AddConstraint(
                    model_name="membership",
                    constraint=models.UniqueConstraint(fields=("user", "tenant"), name="membership_unique_user_tenant"),
                ),
            ],
        ),
    ]
