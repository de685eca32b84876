"""A chunk's enrichment may hold its named entities (``ChunkEnrichment.entities``, indexed in the
enrichment field with the keyphrases and questions) and why they could not be extracted
(``entities_error``). Existing rows get none: ``manage.py enrich SLUG --force --entities`` fills them."""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("knowledge", "0021_chunk_embedding_pending"),
    ]

    operations = [
        migrations.AddField(
            model_name="chunkenrichment",
            name="entities",
            field=models.JSONField(blank=True, default=list),
        ),
        migrations.AddField(
            model_name="chunkenrichment",
            name="entities_error",
            field=models.CharField(blank=True, max_length=500),
        ),
    ]
