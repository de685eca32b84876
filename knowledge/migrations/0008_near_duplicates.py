# Slot for the near-duplicates change: its operations go here (one migration per feature, chained in order).

from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [("knowledge", "0007_versions_kept")]

    operations = []
