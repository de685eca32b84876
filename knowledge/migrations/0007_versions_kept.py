# Versions that retrieval respects: old versions keep their chunks, marked not
# current; BM25 statistics count current chunks only; per-source retention.

from django.db import migrations, models
from django.db.models import Q

# The BM25 triggers of 0003_bm25_postings, now aware of Chunk.is_current (the current definition):
#   knowledge_posting          every chunk's postings, with the chunk's is_current copied, so an
#                              as_of query can still score old versions;
#   knowledge_termstatistic    df over CURRENT chunks only;
#   knowledge_corpusstatistic  chunk count and total length of CURRENT chunks only.
# So default BM25 is exact over the current corpus, whatever old versions are kept. Flipping
# is_current is an UPDATE, which the update trigger handles as remove-then-add.
VERSIONS_SQL = """\
DROP FUNCTION IF EXISTS kb_chunk_statistics_apply(integer, bigint[], bigint[], jsonb[], integer[]);
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

        INSERT INTO knowledge_termstatistic (tenant_id, lexeme, df)
        SELECT c.tenant_id, t.lexeme, count(*)
        FROM unnest(tenant_ids, freqs, currents) AS c(tenant_id, term_freqs, cur), jsonb_object_keys(c.term_freqs) AS t(lexeme)
        WHERE c.cur
        GROUP BY c.tenant_id, t.lexeme
        ORDER BY c.tenant_id, t.lexeme
        ON CONFLICT (tenant_id, lexeme) DO UPDATE SET df = knowledge_termstatistic.df + EXCLUDED.df;

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

CREATE OR REPLACE FUNCTION kb_chunk_statistics_insert() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM kb_chunk_statistics_apply(1, array_agg(tenant_id), array_agg(id), array_agg(term_freqs),
                                      array_agg(term_count), array_agg(is_current))
    FROM new_chunks HAVING count(*) > 0;
    RETURN NULL;
END
$$;

CREATE OR REPLACE FUNCTION kb_chunk_statistics_delete() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM kb_chunk_statistics_apply(-1, array_agg(tenant_id), array_agg(id), array_agg(term_freqs),
                                      array_agg(term_count), array_agg(is_current))
    FROM old_chunks HAVING count(*) > 0;
    RETURN NULL;
END
$$;

CREATE OR REPLACE FUNCTION kb_chunk_statistics_update() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM kb_chunk_statistics_apply(-1, array_agg(tenant_id), array_agg(id), array_agg(term_freqs),
                                      array_agg(term_count), array_agg(is_current))
    FROM old_chunks HAVING count(*) > 0;
    PERFORM kb_chunk_statistics_apply(1, array_agg(tenant_id), array_agg(id), array_agg(term_freqs),
                                      array_agg(term_count), array_agg(is_current))
    FROM new_chunks HAVING count(*) > 0;
    RETURN NULL;
END
$$;
"""
# Until now only current versions had chunks, so every existing chunk (and posting) is current:
# the columns' default says so and the statistics stay as they are.


class Migration(migrations.Migration):
    dependencies = [("knowledge", "0006_membership_roles")]

    operations = [
        migrations.AddField(
            model_name="source",
            name="versions_kept",
            field=models.PositiveIntegerField(
                blank=True,
                help_text="How many old versions per document keep their chunks (searchable with as_of); "
                "empty = all, 0 = none. Applied after each ingestion into the source.",
                null=True,
            ),
        ),
        migrations.AddField(
            model_name="chunk",
            name="is_current",
            field=models.BooleanField(db_default=True, default=True),
        ),
        migrations.AddField(
            model_name="posting",
            name="is_current",
            field=models.BooleanField(db_default=True, default=True),
        ),
        migrations.AddIndex(
            model_name="chunk",
            index=models.Index(
                condition=Q(is_current=True), fields=["tenant", "embedder"], name="chunk_current_tenant_emb_idx"
            ),
        ),
        migrations.RunSQL(VERSIONS_SQL, reverse_sql=migrations.RunSQL.noop),
    ]
