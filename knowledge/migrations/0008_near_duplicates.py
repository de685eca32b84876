# Near-duplicates: MinHash signatures of versions, near-duplicate pairs and clusters
# (knowledge.models.dedup). One migration per feature, chained in order.

import django.db.models.deletion
import django.db.models.functions.comparison
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("knowledge", "0007_versions_kept"),
    ]

    operations = [
        migrations.CreateModel(
            name="MinHashSignature",
            fields=[
                ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                ("hashvalues", models.BinaryField()),
                ("num_perm", models.PositiveIntegerField()),
                ("shingles", models.PositiveIntegerField()),
                ("created_at", models.DateTimeField(auto_now_add=True)),
                (
                    "tenant",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.CASCADE, related_name="+", to="knowledge.tenant"
                    ),
                ),
                (
                    "version",
                    models.OneToOneField(
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="minhash",
                        to="knowledge.documentversion",
                    ),
                ),
            ],
        ),
        migrations.CreateModel(
            name="NearDuplicateCluster",
            fields=[
                ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                ("created_at", models.DateTimeField(auto_now_add=True)),
                ("updated_at", models.DateTimeField(auto_now=True)),
                (
                    "tenant",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="near_duplicate_clusters",
                        to="knowledge.tenant",
                    ),
                ),
            ],
        ),
        migrations.CreateModel(
            name="NearDuplicateMember",
            fields=[
                ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                (
                    "cluster",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="members",
                        to="knowledge.nearduplicatecluster",
                    ),
                ),
                (
                    "tenant",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.CASCADE, related_name="+", to="knowledge.tenant"
                    ),
                ),
                (
                    "version",
                    models.OneToOneField(
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="near_duplicate_member",
                        to="knowledge.documentversion",
                    ),
                ),
            ],
        ),
        migrations.CreateModel(
            name="NearDuplicatePair",
            fields=[
                ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                (
                    "jaccard",
                    models.FloatField(help_text="Exact Jaccard similarity of the two versions' word shingles."),
                ),
                (
                    "kind",
                    models.CharField(
                        choices=[
                            ("meaningless", "Meaningless (formatting only)"),
                            ("meaningful", "Meaningful (a real edit)"),
                        ],
                        max_length=12,
                    ),
                ),
                ("update", models.CharField(blank=True, help_text="What changed, older -> newer.", max_length=1000)),
                (
                    "status",
                    models.CharField(
                        choices=[("duplicate", "Near-duplicate"), ("not_duplicate", "Not a duplicate")],
                        default="duplicate",
                        max_length=14,
                    ),
                ),
                ("created_at", models.DateTimeField(auto_now_add=True)),
                (
                    "newer",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.CASCADE, related_name="+", to="knowledge.documentversion"
                    ),
                ),
                (
                    "older",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.CASCADE, related_name="+", to="knowledge.documentversion"
                    ),
                ),
                (
                    "tenant",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.CASCADE, related_name="+", to="knowledge.tenant"
                    ),
                ),
            ],
            options={
                "constraints": [
                    models.UniqueConstraint(
                        django.db.models.functions.comparison.Least("older", "newer"),
                        django.db.models.functions.comparison.Greatest("older", "newer"),
                        name="neardup_pair_unique",
                    ),
                    models.CheckConstraint(
                        condition=models.Q(("older", models.F("newer")), _negated=True),
                        name="neardup_pair_two_versions",
                    ),
                    models.CheckConstraint(
                        condition=models.Q(("jaccard__gte", 0), ("jaccard__lte", 1)), name="neardup_jaccard_in_0_1"
                    ),
                ],
            },
        ),
    ]
