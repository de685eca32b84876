# Faster BM25 at scale: index-only postings reads and tighter MaxScore bounds.
#
# 1. The postings' primary key index also carries tf, chunk_length and is_current (INCLUDE), so
#    scoring (postings walked by (tenant, lexeme), per-chunk probes by (tenant, lexeme, chunk))
#    reads the index alone: an index-only scan, once the visibility map marks the pages
#    all-visible. Autovacuum is told to visit knowledge_posting after every ~100,000 new or dead
#    postings (about 2,000 chunks) instead of after 20 % of the table, so it does after an
#    ingestion burst, whatever the table's size.
# 2. knowledge_termstatistic keeps, per (tenant, lexeme), max_tf and min_length: bounds over the
#    lexeme's current postings (raised/lowered on insert with GREATEST/LEAST, left as they are on
#    delete: still valid bounds). MaxScore's bound of a lexeme becomes the BM25 term-frequency
#    part at (max_tf, min_length), the exact maximum over any posting within those bounds.
#    Backfilled here from the postings.
# 3. The postings' tenant_id and chunk_id indexes go: the primary key's index serves every read
#    (by (tenant, lexeme[, chunk])), and two indexes fewer are written per posting.

from importlib import import_module

import django.db.models.deletion
from django.db import migrations, models

# kb_chunk_statistics_apply of 0007_versions_kept, now also maintaining max_tf and min_length:
# the current definition, frozen here. Its signature is unchanged, so the trigger functions of
# 0007 call it as before. Only current chunks count, like df: a posting that is current now was
# added as current after the lexeme's row was last created (a row is deleted only when no
# current chunk holds the lexeme), so the row's bounds cover it.
BOUNDS_SQL = """\
CREATE OR REPLACE FUNCTION kb_chunk_statistics_apply(
    delta_sign integer, tenant_ids bigint[], chunk_ids bigint[], freqs jsonb[], lengths integer[], currents boolean[])
RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    -- Rows are locked in (tenant, lexeme) order so concurrent ingestions cannot deadlock.
    -- Additions upsert; removals update (an upsert would check df >= 0 on the candidate row).
    IF delta_sign > 0 THEN
        INSERT INTO knowledge_posting (tenant_id, lexeme, chunk_id, tf, chunk_length, is_current)
        SELECT c.tenant_id, t.key, c.id, t.value::integer, c.len, c.cur
        FROM unnest(tenant_ids, chunk_ids, freqs, lengths, currents) AS c(tenant_id, id, term_freqs, len, cur),
             jsonb_each_text(c.term_freqs) AS t(key, value);

        INSERT INTO knowledge_termstatistic (tenant_id, lexeme, df, max_tf, min_length)
        SELECT c.tenant_id, t.key, count(*), max(t.value::integer), min(c.len)
        FROM unnest(tenant_ids, freqs, lengths, currents) AS c(tenant_id, term_freqs, len, cur),
             jsonb_each_text(c.term_freqs) AS t(key, value)
        WHERE c.cur
        GROUP BY c.tenant_id, t.key
        ORDER BY c.tenant_id, t.key
        ON CONFLICT (tenant_id, lexeme) DO UPDATE SET
            df = knowledge_termstatistic.df + EXCLUDED.df,
            max_tf = GREATEST(knowledge_termstatistic.max_tf, EXCLUDED.max_tf),
            min_length = LEAST(knowledge_termstatistic.min_length, EXCLUDED.min_length);

        INSERT INTO knowledge_corpusstatistic (tenant_id, chunk_count, term_count)
        SELECT c.tenant_id, count(*), sum(c.len)
        FROM unnest(tenant_ids, lengths, currents) AS c(tenant_id, len, cur)
        WHERE c.cur
        GROUP BY c.tenant_id
        ORDER BY c.tenant_id
        ON CONFLICT (tenant_id) DO UPDATE SET
            chunk_count = knowledge_corpusstatistic.chunk_count + EXCLUDED.chunk_count,
            term_count = knowledge_corpusstatistic.term_count + EXCLUDED.term_count;
    ELSE
        DELETE FROM knowledge_posting p
        USING unnest(tenant_ids, chunk_ids, freqs) AS c(tenant_id, id, term_freqs), jsonb_object_keys(c.term_freqs) AS t(lexeme)
        WHERE p.tenant_id = c.tenant_id AND p.lexeme = t.lexeme AND p.chunk_id = c.id;

        PERFORM 1 FROM knowledge_termstatistic ts
        WHERE ts.tenant_id = ANY(tenant_ids)
          AND (ts.tenant_id, ts.lexeme) IN (
              SELECT c.tenant_id, t.lexeme
              FROM unnest(tenant_ids, freqs, currents) AS c(tenant_id, term_freqs, cur), jsonb_object_keys(c.term_freqs) AS t(lexeme)
              WHERE c.cur)
        ORDER BY ts.tenant_id, ts.lexeme
        FOR UPDATE;
        UPDATE knowledge_termstatistic ts SET df = ts.df - d.n
        FROM (
            SELECT c.tenant_id, t.lexeme, count(*) AS n
            FROM unnest(tenant_ids, freqs, currents) AS c(tenant_id, term_freqs, cur), jsonb_object_keys(c.term_freqs) AS t(lexeme)
            WHERE c.cur
            GROUP BY c.tenant_id, t.lexeme
        ) AS d
        WHERE ts.tenant_id = d.tenant_id AND ts.lexeme = d.lexeme;
        DELETE FROM knowledge_termstatistic WHERE tenant_id = ANY(tenant_ids) AND df = 0;

        UPDATE knowledge_corpusstatistic cs
        SET chunk_count = cs.chunk_count - d.n, term_count = cs.term_count - d.len
        FROM (
            SELECT c.tenant_id, count(*) AS n, sum(c.len) AS len
            FROM unnest(tenant_ids, lengths, currents) AS c(tenant_id, len, cur)
            WHERE c.cur
            GROUP BY c.tenant_id
        ) AS d
        WHERE cs.tenant_id = d.tenant_id;
    END IF;
END
$$;
"""
# Reversing restores 0007's function (without the bounds) before the columns are dropped.
VERSIONS_SQL = import_module("knowledge.migrations.0007_versions_kept").VERSIONS_SQL
BACKFILL_SQL = """
UPDATE knowledge_termstatistic ts SET max_tf = b.max_tf, min_length = b.min_length
FROM (
    SELECT tenant_id, lexeme, max(tf) AS max_tf, min(chunk_length) AS min_length
    FROM knowledge_posting WHERE is_current GROUP BY tenant_id, lexeme
) AS b
WHERE ts.tenant_id = b.tenant_id AND ts.lexeme = b.lexeme;
"""
# The primary key's index, rebuilt with the scoring columns included (same key, same name).
COVERING_PK_SQL = """
CREATE UNIQUE INDEX knowledge_posting_pk_covering ON knowledge_posting (tenant_id, lexeme, chunk_id)
    INCLUDE (tf, chunk_length, is_current);
ALTER TABLE knowledge_posting DROP CONSTRAINT knowledge_posting_pkey,
    ADD CONSTRAINT knowledge_posting_pkey PRIMARY KEY USING INDEX knowledge_posting_pk_covering;
ALTER TABLE knowledge_posting SET (
    autovacuum_vacuum_insert_scale_factor = 0, autovacuum_vacuum_insert_threshold = 100000,
    autovacuum_vacuum_scale_factor = 0, autovacuum_vacuum_threshold = 100000,
    autovacuum_analyze_scale_factor = 0.05);
"""
PLAIN_PK_SQL = """
ALTER TABLE knowledge_posting RESET (
    autovacuum_vacuum_insert_scale_factor, autovacuum_vacuum_insert_threshold,
    autovacuum_vacuum_scale_factor, autovacuum_vacuum_threshold, autovacuum_analyze_scale_factor);
CREATE UNIQUE INDEX knowledge_posting_pk_plain ON knowledge_posting (tenant_id, lexeme, chunk_id);
ALTER TABLE knowledge_posting DROP CONSTRAINT knowledge_posting_pkey,
    ADD CONSTRAINT knowledge_posting_pkey PRIMARY KEY USING INDEX knowledge_posting_pk_plain;
"""


class Migration(migrations.Migration):
    dependencies = [("knowledge", "0011_row_level_security")]

    operations = [
        migrations.AddField(
            model_name="termstatistic",
            name="max_tf",
            field=models.IntegerField(null=True),
        ),
        migrations.AddField(
            model_name="termstatistic",
            name="min_length",
            field=models.IntegerField(null=True),
        ),
        migrations.RunSQL(BOUNDS_SQL, reverse_sql=VERSIONS_SQL),
        migrations.RunSQL(BACKFILL_SQL, reverse_sql=migrations.RunSQL.noop),
        migrations.AlterField(
            model_name="termstatistic",
            name="max_tf",
            field=models.IntegerField(help_text="At least the largest tf of the lexeme in a current chunk."),
        ),
        migrations.AlterField(
            model_name="termstatistic",
            name="min_length",
            field=models.IntegerField(help_text="At most the shortest current chunk (in lexemes) holding it."),
        ),
        migrations.RunSQL(COVERING_PK_SQL, reverse_sql=PLAIN_PK_SQL),
        # The primary key's index starts with tenant_id: the foreign keys' own indexes go. Scoring
        # reaches postings by (tenant, lexeme[, chunk]); with a chunk_id index the planner read
        # every posting of each candidate chunk (with heap fetches) instead of probing the key.
        migrations.AlterField(
            model_name="posting",
            name="tenant",
            field=models.ForeignKey(
                db_constraint=False,
                db_index=False,
                on_delete=django.db.models.deletion.DO_NOTHING,
                related_name="+",
                to="knowledge.tenant",
            ),
        ),
        migrations.AlterField(
            model_name="posting",
            name="chunk",
            field=models.ForeignKey(
                db_constraint=False,
                db_index=False,
                on_delete=django.db.models.deletion.DO_NOTHING,
                related_name="+",
                to="knowledge.chunk",
            ),
        ),
    ]
