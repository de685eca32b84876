# Slot for the versions change: its operations go here (one migration per feature, chained in order).

from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [("knowledge", "0006_membership_roles")]

    operations = []
