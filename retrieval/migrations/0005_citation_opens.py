# Citation opens: the documents a user opened from an answer, read by personalization.

import django.db.models.deletion
from django.conf import settings
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("knowledge", "0004_remove_chunk_search_vector"),
        ("retrieval", "0004_conversations"),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.CreateModel(
            name="CitationOpen",
            fields=[
                ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                ("citation", models.PositiveSmallIntegerField(help_text="[n] of the answer.")),
                ("opens", models.PositiveIntegerField(default=1)),
                ("opened_at", models.DateTimeField(auto_now=True)),
                (
                    "document",
                    models.ForeignKey(
                        blank=True,
                        null=True,
                        on_delete=django.db.models.deletion.SET_NULL,
                        related_name="+",
                        to="knowledge.document",
                    ),
                ),
                (
                    "source",
                    models.ForeignKey(
                        blank=True,
                        null=True,
                        on_delete=django.db.models.deletion.SET_NULL,
                        related_name="+",
                        to="knowledge.source",
                    ),
                ),
                (
                    "tenant",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="citation_opens",
                        to="knowledge.tenant",
                    ),
                ),
                (
                    "trace",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="citation_opens",
                        to="retrieval.trace",
                    ),
                ),
                (
                    "user",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="citation_opens",
                        to=settings.AUTH_USER_MODEL,
                    ),
                ),
            ],
            options={
                "ordering": ["-opened_at", "-id"],
                "indexes": [models.Index(fields=["tenant", "user"], name="citationopen_tenant_user_idx")],
                "constraints": [
                    models.CheckConstraint(condition=models.Q(citation__gte=1), name="citationopen_citation_positive"),
                    models.CheckConstraint(condition=models.Q(opens__gte=1), name="citationopen_opens_positive"),
                    models.UniqueConstraint(
                        fields=("trace", "user", "citation"), name="citationopen_one_per_user_citation"
                    ),
                ],
            },
        ),
    ]
