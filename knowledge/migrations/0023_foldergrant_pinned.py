"""Folder grants pin the folder granted (``FolderGrant.device`` and ``inode``) and may allow hard
links (``allow_hard_links``, off). Existing grants are pinned here when their path is a folder
now (not a link); the others are pinned at their first use, or refused there if their path has
become a link (``knowledge.folder_grants``)."""

import os
import stat

from django.db import migrations, models


def pin_existing(apps, schema_editor):
    FolderGrant = apps.get_model("knowledge", "FolderGrant")
    for grant in FolderGrant.objects.filter(device__isnull=True):
        try:
            info = os.lstat(grant.path)
        except OSError:
            continue
        if stat.S_ISDIR(info.st_mode) and os.path.realpath(grant.path) == grant.path:
            FolderGrant.objects.filter(pk=grant.pk).update(device=info.st_dev, inode=info.st_ino)


class Migration(migrations.Migration):
    dependencies = [
        ("knowledge", "0022_enrichment_entities"),
    ]

    operations = [
        migrations.AddField(
            model_name="foldergrant",
            name="allow_hard_links",
            field=models.BooleanField(
                default=False,
                help_text="Read files with several hard links, or on another file system, inside this folder "
                "(otherwise skipped: such a file can be another tenant's).",
            ),
        ),
        migrations.AddField(
            model_name="foldergrant",
            name="device",
            field=models.DecimalField(
                blank=True, decimal_places=0, help_text="st_dev of the folder when granted.", max_digits=20, null=True
            ),
        ),
        migrations.AddField(
            model_name="foldergrant",
            name="inode",
            field=models.DecimalField(
                blank=True, decimal_places=0, help_text="st_ino of the folder when granted.", max_digits=20, null=True
            ),
        ),
        migrations.RunPython(pin_existing, migrations.RunPython.noop),
    ]
