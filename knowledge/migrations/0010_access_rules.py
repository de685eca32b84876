# Groups and access rules: knowledge.access reads them at query time.

import django.db.models.deletion
from django.conf import settings
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("knowledge", "0009_memberships"),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.AddIndex(
            model_name="chunk",
            index=models.Index(fields=["version"], include=["id"], name="chunk_version_incl_id_idx"),
        ),
        migrations.CreateModel(
            name="AccessGroup",
            fields=[
                ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                ("name", models.CharField(max_length=200)),
                ("created_at", models.DateTimeField(auto_now_add=True)),
                (
                    "members",
                    models.ManyToManyField(blank=True, related_name="access_groups", to=settings.AUTH_USER_MODEL),
                ),
                (
                    "tenant",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="access_groups",
                        to="knowledge.tenant",
                    ),
                ),
            ],
            options={
                "verbose_name": "group",
                "constraints": [
                    models.UniqueConstraint(fields=("tenant", "name"), name="accessgroup_unique_name_per_tenant")
                ],
            },
        ),
        migrations.CreateModel(
            name="AccessRule",
            fields=[
                ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                ("created_at", models.DateTimeField(auto_now_add=True)),
                (
                    "document",
                    models.ForeignKey(
                        blank=True,
                        null=True,
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="access_rules",
                        to="knowledge.document",
                    ),
                ),
                (
                    "group",
                    models.ForeignKey(
                        blank=True,
                        null=True,
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="rules",
                        to="knowledge.accessgroup",
                    ),
                ),
                (
                    "source",
                    models.ForeignKey(
                        blank=True,
                        null=True,
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="access_rules",
                        to="knowledge.source",
                    ),
                ),
                (
                    "tenant",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="access_rules",
                        to="knowledge.tenant",
                    ),
                ),
                (
                    "user",
                    models.ForeignKey(
                        blank=True,
                        null=True,
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="access_rules",
                        to=settings.AUTH_USER_MODEL,
                    ),
                ),
            ],
            options={
                "verbose_name": "access rule",
                "indexes": [models.Index(fields=["tenant", "source", "document"], name="accessrule_tenant_target_idx")],
                "constraints": [
                    models.CheckConstraint(
                        condition=models.Q(
                            models.Q(("document__isnull", True), ("source__isnull", False)),
                            models.Q(("document__isnull", False), ("source__isnull", True)),
                            _connector="OR",
                        ),
                        name="accessrule_one_target",
                    ),
                    models.CheckConstraint(
                        condition=models.Q(
                            models.Q(("group__isnull", False), ("user__isnull", True)),
                            models.Q(("group__isnull", True), ("user__isnull", False)),
                            _connector="OR",
                        ),
                        name="accessrule_one_grantee",
                    ),
                    models.UniqueConstraint(
                        fields=("source", "document", "group", "user"),
                        name="accessrule_unique_grant",
                        nulls_distinct=False,
                    ),
                ],
            },
        ),
    ]
