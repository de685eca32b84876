"""``knowledge_documentversion.tenant_id``: a version carries its document's tenant on its own row.

1. The column, nullable, filled from each version's document (one UPDATE), then NOT NULL.
2. ``UNIQUE (id, tenant_id)`` on the documents and a foreign key ``(document_id, tenant_id)`` to
   it, so a version can only hold its own document's tenant (the database refuses anything else).
3. Row-level security: ``kb_rls_enable()`` (migration 0011) now gives the versions the plain
   ``tenant_id`` policy instead of the policy that looked the document up per row.

The shape a table distributed by ``tenant_id`` needs (``docs/scale.md``). Reads are unchanged:
``VersionQuerySet`` still scopes versions through their document.
"""

import django.db.models.deletion
from django.db import migrations, models

FILL = """
UPDATE knowledge_documentversion v SET tenant_id = d.tenant_id
FROM knowledge_document d WHERE d.id = v.document_id AND v.tenant_id IS NULL
"""

SAME_TENANT_FK = """
ALTER TABLE knowledge_documentversion ADD CONSTRAINT version_document_same_tenant_fk
    FOREIGN KEY (document_id, tenant_id) REFERENCES knowledge_document (id, tenant_id)
    DEFERRABLE INITIALLY DEFERRED;
"""
SAME_TENANT_FK_DROP = "ALTER TABLE knowledge_documentversion DROP CONSTRAINT IF EXISTS version_document_same_tenant_fk;"

# Forwards: the tenant policy on every table with tenant_id (now the versions too). Backwards:
# the versions' policy through their document again (the column goes with the earlier operations).
RLS = "SELECT kb_rls_enable();"
RLS_BACK = "SELECT kb_rls_enable_child('knowledge_documentversion', 'document_id', 'knowledge_document');"


class Migration(migrations.Migration):
    dependencies = [
        ("core", "0001_initial"),
        ("knowledge", "0018_connectors_and_sync"),
    ]

    operations = [
        migrations.AddField(
            model_name="documentversion",
            name="tenant",
            field=models.ForeignKey(
                null=True, on_delete=django.db.models.deletion.CASCADE, related_name="+", to="core.tenant"
            ),
        ),
        migrations.RunSQL(FILL, migrations.RunSQL.noop),
        migrations.AlterField(
            model_name="documentversion",
            name="tenant",
            field=models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name="+", to="core.tenant"),
        ),
        migrations.AddConstraint(
            model_name="document",
            constraint=models.UniqueConstraint(fields=("id", "tenant"), name="document_unique_id_tenant"),
        ),
        migrations.RunSQL(SAME_TENANT_FK, SAME_TENANT_FK_DROP),
        migrations.RunSQL(RLS, RLS_BACK),
    ]
