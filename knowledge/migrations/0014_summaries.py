"""Per-document summaries: ``Chunk.kind`` ("body" or "summary") and its invariant.

A summary is a chunk of its version at ``SUMMARY_ORDINAL`` (1,000,000), so the existing unique
(version, ordinal) constraint allows one per version and no body chunk can take its place. The
column has a database default, so every existing insert path (ingestion, COPY loads) keeps
writing body chunks unchanged; the chunk table's BM25 triggers and row-level security policy
cover summary chunks as they cover any chunk.
"""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("knowledge", "0013_enrichment"),
    ]

    operations = [
        migrations.AddField(
            model_name="chunk",
            name="kind",
            field=models.CharField(
                choices=[("body", "Body"), ("summary", "Summary")], db_default="body", default="body", max_length=10
            ),
        ),
        migrations.AddConstraint(
            model_name="chunk",
            constraint=models.CheckConstraint(
                condition=models.Q(("kind", "body"), ("ordinal__lt", 1000000))
                | models.Q(("kind", "summary"), ("ordinal", 1000000)),
                name="chunk_kind_ordinal",
            ),
        ),
        migrations.AddIndex(
            model_name="chunk",
            index=models.Index(
                condition=models.Q(("is_current", True), ("kind", "summary")),
                fields=["tenant"],
                include=["id"],
                name="chunk_summary_tenant_idx",
            ),
        ),
    ]
