"""Chunks may wait for their embedding: ``Chunk.embedding`` becomes nullable (NULL until the
embedding task fills it when ingestion defers embedding to ``KB_EMBED_QUEUE``), with a partial
index over the waiting chunks for that task."""

import pgvector.django
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("knowledge", "0020_foldergrant"),
    ]

    operations = [
        migrations.AlterField(
            model_name="chunk",
            name="embedding",
            field=pgvector.django.VectorField(null=True),
        ),
        migrations.AddIndex(
            model_name="chunk",
            index=models.Index(
                condition=models.Q(("embedding__isnull", True)),
                fields=["tenant", "id"],
                name="chunk_embedding_pending_idx",
            ),
        ),
    ]
