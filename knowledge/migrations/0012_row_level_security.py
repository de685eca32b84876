# Slot for the row-level-security change: its operations go here (one migration per feature, chained in order).

from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [("knowledge", "0011_chunk_enrichment")]

    operations = []
