"""The quotas find one home in the knowledge app (``knowledge.quotas``):

- ``TenantQuota`` (from ``core``) and ``LLMUsage`` (from ``retrieval``) join the knowledge app,
  state only: their tables keep their names (``core_tenantquota``, ``retrieval_llmusage``) and
  their row-level-security policies, and no row moves. The content types (so permissions and
  admin history) follow them to the ``knowledge`` label. ``core.0007`` and ``retrieval.0012``
  drop them from their old apps' state.
- ``DocumentVersion.original_bytes``: the size of the version's kept original file
  (``knowledge.originals``), counted in the tenant's ``stored_bytes``; filled for the originals
  already on disk.
"""

from pathlib import Path

import django.db.models.deletion
from django.conf import settings
from django.db import migrations, models

MOVED = {"tenantquota": "core", "llmusage": "retrieval"}


def _relabel(apps, *, forward: bool) -> None:
    content_type = apps.get_model("contenttypes", "ContentType")
    for model, old in MOVED.items():
        source, target = (old, "knowledge") if forward else ("knowledge", old)
        if not content_type.objects.filter(app_label=target, model=model).exists():
            content_type.objects.filter(app_label=source, model=model).update(app_label=target)


def content_types_to_knowledge(apps, schema_editor):
    _relabel(apps, forward=True)


def content_types_back(apps, schema_editor):
    _relabel(apps, forward=False)


def original_bytes_fill(apps, schema_editor):
    """Each kept original's size, from ``<KB_DATA_DIR>/files/<tenant>/<document>/<number>.pdf``."""
    version = apps.get_model("knowledge", "DocumentVersion")
    root = Path(settings.KB_DATA_DIR) / "files"
    if not root.is_dir():
        return
    for path in root.glob("*/*/*.pdf"):
        tenant, document, number = path.parent.parent.name, path.parent.name, path.stem
        if tenant.isdigit() and document.isdigit() and number.isdigit():
            version.objects.filter(tenant_id=int(tenant), document_id=int(document), number=int(number)).update(
                original_bytes=path.stat().st_size
            )


class Migration(migrations.Migration):
    dependencies = [
        ("contenttypes", "0002_remove_content_type_name"),
        ("core", "0006_runtime_role"),
        ("knowledge", "0025_source_kind_conversation"),
        ("retrieval", "0011_llm_usage"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.CreateModel(
                    name="TenantQuota",
                    fields=[
                        (
                            "id",
                            models.BigAutoField(
                                auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                            ),
                        ),
                        (
                            "max_documents",
                            models.PositiveBigIntegerField(blank=True, help_text="Live documents.", null=True),
                        ),
                        (
                            "max_stored_bytes",
                            models.PositiveBigIntegerField(
                                blank=True,
                                help_text="Bytes (UTF-8) of the stored text of every kept version.",
                                null=True,
                            ),
                        ),
                        (
                            "max_chunks",
                            models.PositiveBigIntegerField(blank=True, help_text="Searchable chunks.", null=True),
                        ),
                        (
                            "max_sources",
                            models.PositiveIntegerField(blank=True, help_text="Sources of any kind.", null=True),
                        ),
                        (
                            "max_syncs_per_day",
                            models.PositiveIntegerField(blank=True, help_text="Sync runs in 24 hours.", null=True),
                        ),
                        (
                            "max_llm_tokens_per_day",
                            models.PositiveBigIntegerField(
                                blank=True, help_text="LLM tokens (prompt + completion) in 24 hours.", null=True
                            ),
                        ),
                        ("updated_at", models.DateTimeField(auto_now=True)),
                        (
                            "tenant",
                            models.OneToOneField(
                                on_delete=django.db.models.deletion.CASCADE, related_name="quota", to="core.tenant"
                            ),
                        ),
                    ],
                    options={"db_table": "core_tenantquota"},
                ),
                migrations.CreateModel(
                    name="LLMUsage",
                    fields=[
                        (
                            "id",
                            models.BigAutoField(
                                auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                            ),
                        ),
                        ("purpose", models.CharField(max_length=40)),
                        ("tokens_in", models.IntegerField(default=0)),
                        ("tokens_out", models.IntegerField(default=0)),
                        ("created_at", models.DateTimeField(auto_now_add=True)),
                        (
                            "tenant",
                            models.ForeignKey(
                                on_delete=django.db.models.deletion.CASCADE, related_name="+", to="core.tenant"
                            ),
                        ),
                    ],
                    options={
                        "db_table": "retrieval_llmusage",
                        "indexes": [
                            models.Index(fields=["tenant", "-created_at"], name="llmusage_tenant_created_idx"),
                            models.Index(fields=["created_at"], name="llmusage_created_idx"),
                        ],
                        "constraints": [
                            models.CheckConstraint(
                                condition=models.Q(("tokens_in__gte", 0)), name="llmusage_tokens_in_non_negative"
                            ),
                            models.CheckConstraint(
                                condition=models.Q(("tokens_out__gte", 0)), name="llmusage_tokens_out_non_negative"
                            ),
                        ],
                    },
                ),
            ],
        ),
        migrations.RunPython(content_types_to_knowledge, content_types_back),
        migrations.AddField(
            model_name="documentversion",
            name="original_bytes",
            field=models.PositiveBigIntegerField(default=0),
        ),
        migrations.RunPython(original_bytes_fill, migrations.RunPython.noop),
    ]
