"""Tenant, Membership and MembershipToken leave the knowledge app for core (state only: the tables
stay), knowledge rows point at ``core.Tenant``, and the content types (so permissions and admin
history) follow the models to the ``core`` label."""

import django.db.models.deletion
from django.db import migrations, models


MODELS = ("tenant", "membership", "membershiptoken")


def _relabel(apps, old: str, new: str) -> None:
    content_type = apps.get_model("contenttypes", "ContentType")
    for model in MODELS:
        if not content_type.objects.filter(app_label=new, model=model).exists():
            content_type.objects.filter(app_label=old, model=model).update(app_label=new)


def content_types_to_core(apps, schema_editor):
    _relabel(apps, "knowledge", "core")


def content_types_to_knowledge(apps, schema_editor):
    _relabel(apps, "core", "knowledge")


class Migration(migrations.Migration):
    dependencies = [
        ("contenttypes", "0002_remove_content_type_name"),
        ("core", "0001_initial"),
        ("knowledge", "0016_enrichment_current"),
        # every other app points at core's models before knowledge's leave the state
        ("people", "0003_membership_in_core"),
        ("quality", "0004_tenant_in_core"),
        ("retrieval", "0006_tenant_in_core"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.RemoveField(
                    model_name="membershiptoken",
                    name="membership",
                ),
                migrations.AlterField(
                    model_name="enrichmenttermstatistic",
                    name="tenant",
                    field=models.ForeignKey(
                        on_delete=django.db.models.deletion.CASCADE, related_name="+", to="core.tenant"
                    ),
                ),
                migrations.AlterField(
                    model_name="source",
                    name="tenant",
                    field=models.ForeignKey(
                        on_delete=django.db.models.deletion.CASCADE, related_name="sources", to="core.tenant"
                    ),
                ),
                migrations.AlterField(
                    model_name="chunkenrichment",
                    name="tenant",
                    field=models.ForeignKey(
                        on_delete=django.db.models.deletion.CASCADE, related_name="+", to="core.tenant"
                    ),
                ),
                migrations.AlterField(
                    model_name="document",
                    name="tenant",
                    field=models.ForeignKey(
                        on_delete=django.db.models.deletion.CASCADE, related_name="documents", to="core.tenant"
                    ),
                ),
                migrations.AlterField(
                    model_name="accessrule",
                    name="tenant",
                    field=models.ForeignKey(
                        on_delete=django.db.models.deletion.CASCADE, related_name="access_rules", to="core.tenant"
                    ),
                ),
                migrations.AlterField(
                    model_name="minhashsignature",
                    name="tenant",
                    field=models.ForeignKey(
                        on_delete=django.db.models.deletion.CASCADE, related_name="+", to="core.tenant"
                    ),
                ),
                migrations.AlterField(
                    model_name="enrichmentcorpusstatistic",
                    name="tenant",
                    field=models.OneToOneField(
                        on_delete=django.db.models.deletion.CASCADE,
                        primary_key=True,
                        related_name="+",
                        serialize=False,
                        to="core.tenant",
                    ),
                ),
                migrations.AlterField(
                    model_name="accessgroup",
                    name="tenant",
                    field=models.ForeignKey(
                        on_delete=django.db.models.deletion.CASCADE, related_name="access_groups", to="core.tenant"
                    ),
                ),
                migrations.AlterField(
                    model_name="nearduplicatepair",
                    name="tenant",
                    field=models.ForeignKey(
                        on_delete=django.db.models.deletion.CASCADE, related_name="+", to="core.tenant"
                    ),
                ),
                migrations.AlterField(
                    model_name="posting",
                    name="tenant",
                    field=models.ForeignKey(
                        db_constraint=False,
                        db_index=False,
                        on_delete=django.db.models.deletion.DO_NOTHING,
                        related_name="+",
                        to="core.tenant",
                    ),
                ),
                migrations.AlterField(
                    model_name="nearduplicatecluster",
                    name="tenant",
                    field=models.ForeignKey(
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="near_duplicate_clusters",
                        to="core.tenant",
                    ),
                ),
                migrations.AlterField(
                    model_name="chunk",
                    name="tenant",
                    field=models.ForeignKey(
                        on_delete=django.db.models.deletion.CASCADE, related_name="chunks", to="core.tenant"
                    ),
                ),
                migrations.AlterField(
                    model_name="corpusstatistic",
                    name="tenant",
                    field=models.OneToOneField(
                        on_delete=django.db.models.deletion.CASCADE, related_name="+", to="core.tenant"
                    ),
                ),
                migrations.AlterField(
                    model_name="termstatistic",
                    name="tenant",
                    field=models.ForeignKey(
                        on_delete=django.db.models.deletion.CASCADE, related_name="+", to="core.tenant"
                    ),
                ),
                migrations.AlterField(
                    model_name="nearduplicatemember",
                    name="tenant",
                    field=models.ForeignKey(
                        on_delete=django.db.models.deletion.CASCADE, related_name="+", to="core.tenant"
                    ),
                ),
                migrations.AlterField(
                    model_name="enrichmentposting",
                    name="tenant",
                    field=models.ForeignKey(
                        db_constraint=False,
                        db_index=False,
                        on_delete=django.db.models.deletion.DO_NOTHING,
                        related_name="+",
                        to="core.tenant",
                    ),
                ),
                migrations.AlterField(
                    model_name="ingestionjob",
                    name="tenant",
                    field=models.ForeignKey(
                        on_delete=django.db.models.deletion.CASCADE, related_name="ingestion_jobs", to="core.tenant"
                    ),
                ),
                migrations.DeleteModel(
                    name="Membership",
                ),
                migrations.DeleteModel(
                    name="MembershipToken",
                ),
                migrations.DeleteModel(
                    name="Tenant",
                ),
            ],
        ),
        migrations.RunPython(content_types_to_core, content_types_to_knowledge),
    ]
