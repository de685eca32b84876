"""The enrichment field's postings carry their chunk's current flag.

Default retrieval (current versions of every source) then scores the field from its postings'
primary-key index alone, as the body's BM25 does (knowledge 0007 and 0012), instead of joining
every matching posting to its chunk for the filter.

1. ``knowledge_enrichmentposting.is_current`` (default true), backfilled from the chunks.
2. The trigger ``chunk_enrichment_current`` (after each UPDATE statement on knowledge_chunk)
   copies a changed ``is_current`` to the chunk's enrichment postings. New postings take the flag
   from their chunk row, read under FOR SHARE by ``knowledge.enrichment.services`` (a concurrent
   flag change waits for the insert to commit, then its trigger sees the new postings).
3. The primary key's index INCLUDEs tf, field_length and is_current (same key, same name), with
   the same autovacuum thresholds as the body's postings, so reads are index-only.
4. The tenant_id index goes: the primary key's index starts with tenant_id.
"""

import django.db.models.deletion
from django.db import migrations, models

TRIGGER_SQL = """
CREATE OR REPLACE FUNCTION kb_chunk_enrichment_current() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    UPDATE knowledge_enrichmentposting p SET is_current = n.is_current
    FROM new_chunks n JOIN old_chunks o ON o.id = n.id
    WHERE o.is_current IS DISTINCT FROM n.is_current
      AND p.chunk_id = n.id AND p.tenant_id = n.tenant_id AND p.is_current IS DISTINCT FROM n.is_current;
    RETURN NULL;
END
$$;
CREATE TRIGGER chunk_enrichment_current AFTER UPDATE ON knowledge_chunk
    REFERENCING OLD TABLE AS old_chunks NEW TABLE AS new_chunks
    FOR EACH STATEMENT EXECUTE FUNCTION kb_chunk_enrichment_current();
"""
TRIGGER_REVERSE = """
DROP TRIGGER IF EXISTS chunk_enrichment_current ON knowledge_chunk;
DROP FUNCTION IF EXISTS kb_chunk_enrichment_current();
"""
BACKFILL_SQL = """
UPDATE knowledge_enrichmentposting p SET is_current = false
FROM knowledge_chunk c WHERE c.id = p.chunk_id AND NOT c.is_current;
"""
COVERING_PK_SQL = """
CREATE UNIQUE INDEX knowledge_enrichmentposting_pk_covering
    ON knowledge_enrichmentposting (tenant_id, lexeme, chunk_id) INCLUDE (tf, field_length, is_current);
ALTER TABLE knowledge_enrichmentposting DROP CONSTRAINT knowledge_enrichmentposting_pkey,
    ADD CONSTRAINT knowledge_enrichmentposting_pkey PRIMARY KEY USING INDEX knowledge_enrichmentposting_pk_covering;
ALTER TABLE knowledge_enrichmentposting SET (
    autovacuum_vacuum_insert_scale_factor = 0, autovacuum_vacuum_insert_threshold = 100000,
    autovacuum_vacuum_scale_factor = 0, autovacuum_vacuum_threshold = 100000,
    autovacuum_analyze_scale_factor = 0.05);
"""
PLAIN_PK_SQL = """
ALTER TABLE knowledge_enrichmentposting RESET (
    autovacuum_vacuum_insert_scale_factor, autovacuum_vacuum_insert_threshold,
    autovacuum_vacuum_scale_factor, autovacuum_vacuum_threshold, autovacuum_analyze_scale_factor);
CREATE UNIQUE INDEX knowledge_enrichmentposting_pk_plain ON knowledge_enrichmentposting (tenant_id, lexeme, chunk_id);
ALTER TABLE knowledge_enrichmentposting DROP CONSTRAINT knowledge_enrichmentposting_pkey,
    ADD CONSTRAINT knowledge_enrichmentposting_pkey PRIMARY KEY USING INDEX knowledge_enrichmentposting_pk_plain;
"""


class Migration(migrations.Migration):
    dependencies = [("knowledge", "0015_near_duplicate_pairs_reclassify")]

    operations = [
        migrations.AddField(
            model_name="enrichmentposting",
            name="is_current",
            field=models.BooleanField(db_default=True, default=True),
        ),
        migrations.RunSQL(BACKFILL_SQL, reverse_sql=migrations.RunSQL.noop),
        migrations.RunSQL(TRIGGER_SQL, reverse_sql=TRIGGER_REVERSE),
        migrations.RunSQL(COVERING_PK_SQL, reverse_sql=PLAIN_PK_SQL),
        migrations.AlterField(
            model_name="enrichmentposting",
            name="tenant",
            field=models.ForeignKey(
                db_constraint=False,
                db_index=False,
                on_delete=django.db.models.deletion.DO_NOTHING,
                related_name="+",
                to="knowledge.tenant",
            ),
        ),
    ]
