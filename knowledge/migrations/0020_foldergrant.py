"""Folder grants: the folders on the server the operator lets a tenant's sources read
(``knowledge.folder_grants``), with the tenant policy of row-level security."""

import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("core", "0003_tenant_embedder_known"),
        ("knowledge", "0019_documentversion_tenant"),
    ]

    operations = [
        migrations.CreateModel(
            name="FolderGrant",
            fields=[
                ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                ("path", models.CharField(max_length=2000)),
                (
                    "granted_by",
                    models.CharField(blank=True, help_text="Who granted it: a superuser or the CLI.", max_length=200),
                ),
                ("created_at", models.DateTimeField(auto_now_add=True)),
                (
                    "tenant",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.CASCADE, related_name="folder_grants", to="core.tenant"
                    ),
                ),
            ],
            options={
                "constraints": [
                    models.UniqueConstraint(fields=("tenant", "path"), name="foldergrant_unique_path_per_tenant"),
                    models.CheckConstraint(
                        condition=models.Q(("path__startswith", "/")), name="foldergrant_path_absolute"
                    ),
                ],
            },
        ),
        migrations.RunSQL("SELECT kb_rls_enable();", migrations.RunSQL.noop),
    ]
