# Near-duplicate pairs: re-classify the stored pairs with the classifier that reads reST
# roles, hyperlinks and their targets, directive options and Markdown links as markup
# (knowledge.dedup.near.meaning_words), so a pair found before it gets the same kind and update
# as a pair found after it. Data only; reversing leaves the new kinds in place.

from django.db import migrations


def reclassify(apps, schema_editor):
    from knowledge.dedup.near import pair_classify  # pure function over two texts, no model code

    Pair = apps.get_model("knowledge", "NearDuplicatePair")
    changed = []
    for pair in Pair.objects.select_related("older", "newer").iterator(chunk_size=200):
        found = pair_classify(pair.older.text, pair.newer.text)
        if (pair.kind, pair.update) != (found.kind, found.update[:1000]):
            pair.kind, pair.update = found.kind, found.update[:1000]
            changed.append(pair)
    Pair.objects.bulk_update(changed, ["kind", "update"], batch_size=500)


class Migration(migrations.Migration):
    dependencies = [
        ("knowledge", "0014_summaries"),
    ]

    operations = [
        migrations.RunPython(reclassify, migrations.RunPython.noop),
    ]
