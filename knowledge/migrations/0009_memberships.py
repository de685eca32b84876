# Slot for the memberships change: its operations go here (one migration per feature, chained in order).

from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [("knowledge", "0008_near_duplicates")]

    operations = []
