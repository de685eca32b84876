"""``retrieval_tracestep.tenant_id``: a step carries its trace's tenant on its own row.

1. The column, nullable, filled from each step's trace (one UPDATE), then NOT NULL.
2. ``UNIQUE (id, tenant_id)`` on the traces and a foreign key ``(trace_id, tenant_id)`` to it, so
   a step can only hold its own trace's tenant (the database refuses anything else).
3. Row-level security: ``kb_rls_enable()`` (migration ``knowledge.0011``) now gives the steps the
   plain ``tenant_id`` policy instead of the policy that looked the trace up per row.

The shape a table distributed by ``tenant_id`` needs (``docs/scale.md``); no query changes.
"""

import django.db.models.deletion
from django.db import migrations, models

FILL = """
UPDATE retrieval_tracestep s SET tenant_id = t.tenant_id
FROM retrieval_trace t WHERE t.id = s.trace_id AND s.tenant_id IS NULL
"""

SAME_TENANT_FK = """
ALTER TABLE retrieval_tracestep ADD CONSTRAINT tracestep_trace_same_tenant_fk
    FOREIGN KEY (trace_id, tenant_id) REFERENCES retrieval_trace (id, tenant_id)
    DEFERRABLE INITIALLY DEFERRED;
"""
SAME_TENANT_FK_DROP = "ALTER TABLE retrieval_tracestep DROP CONSTRAINT IF EXISTS tracestep_trace_same_tenant_fk;"

# Forwards: the tenant policy on every table with tenant_id (now the steps too). Backwards: the
# steps' policy through their trace again (the column goes with the previous operations).
RLS = "SELECT kb_rls_enable();"
RLS_BACK = "SELECT kb_rls_enable_child('retrieval_tracestep', 'trace_id', 'retrieval_trace');"


class Migration(migrations.Migration):
    dependencies = [
        ("core", "0001_initial"),
        ("knowledge", "0011_row_level_security"),
        ("retrieval", "0007_people_models_moved"),
    ]

    operations = [
        migrations.AddField(
            model_name="tracestep",
            name="tenant",
            field=models.ForeignKey(
                null=True, on_delete=django.db.models.deletion.CASCADE, related_name="+", to="core.tenant"
            ),
        ),
        migrations.RunSQL(FILL, migrations.RunSQL.noop),
        migrations.AlterField(
            model_name="tracestep",
            name="tenant",
            field=models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name="+", to="core.tenant"),
        ),
        migrations.AddConstraint(
            model_name="trace",
            constraint=models.UniqueConstraint(fields=("id", "tenant"), name="trace_unique_id_tenant"),
        ),
        migrations.RunSQL(SAME_TENANT_FK, SAME_TENANT_FK_DROP),
        migrations.RunSQL(RLS, RLS_BACK),
    ]
