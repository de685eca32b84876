-- BM25 support inside PostgreSQL (applied by migration 0002_bm25).
--
-- kb_term_freqs / kb_term_count turn a tsvector into {lexeme: term frequency} and its total
-- number of lexeme occurrences; Chunk.term_freqs and Chunk.term_count are generated from them.
-- The statement-level triggers keep three derived tables exact on every INSERT, UPDATE and
-- DELETE of chunks, including ORM cascades:
--   knowledge_posting          (tenant, lexeme, chunk) -> tf, chunk length: the inverted index;
--   knowledge_termstatistic    document frequency per lexeme per tenant;
--   knowledge_corpusstatistic  chunk count and total length per tenant.

CREATE OR REPLACE FUNCTION kb_term_freqs(tsvector) RETURNS jsonb
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE AS $$
    SELECT COALESCE(jsonb_object_agg(lexeme, COALESCE(cardinality(positions), 1)), '{}'::jsonb)
    FROM unnest($1)
$$;

CREATE OR REPLACE FUNCTION kb_term_count(tsvector) RETURNS integer
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE AS $$
    SELECT COALESCE(sum(COALESCE(cardinality(positions), 1)), 0)::integer FROM unnest($1)
$$;

DROP FUNCTION IF EXISTS kb_chunk_statistics_apply(integer, bigint[], jsonb[], integer[]);
CREATE OR REPLACE FUNCTION kb_chunk_statistics_apply(
    delta_sign integer, tenant_ids bigint[], chunk_ids bigint[], freqs jsonb[], lengths integer[])
RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    -- Rows are locked in (tenant, lexeme) order so concurrent ingestions cannot deadlock.
    -- Additions upsert; removals update (an upsert would check df >= 0 on the candidate row).
    IF delta_sign > 0 THEN
        INSERT INTO knowledge_posting (tenant_id, lexeme, chunk_id, tf, chunk_length)
        SELECT c.tenant_id, t.key, c.id, t.value::integer, c.len
        FROM unnest(tenant_ids, chunk_ids, freqs, lengths) AS c(tenant_id, id, term_freqs, len),
             jsonb_each_text(c.term_freqs) AS t(key, value);

        INSERT INTO knowledge_termstatistic (tenant_id, lexeme, df)
        SELECT c.tenant_id, t.lexeme, count(*)
        FROM unnest(tenant_ids, freqs) AS c(tenant_id, term_freqs), jsonb_object_keys(c.term_freqs) AS t(lexeme)
        GROUP BY c.tenant_id, t.lexeme
        ORDER BY c.tenant_id, t.lexeme
        ON CONFLICT (tenant_id, lexeme) DO UPDATE SET df = knowledge_termstatistic.df + EXCLUDED.df;

        INSERT INTO knowledge_corpusstatistic (tenant_id, chunk_count, term_count)
        SELECT c.tenant_id, count(*), sum(c.len)
        FROM unnest(tenant_ids, lengths) AS c(tenant_id, len)
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
              FROM unnest(tenant_ids, freqs) AS c(tenant_id, term_freqs), jsonb_object_keys(c.term_freqs) AS t(lexeme))
        ORDER BY ts.tenant_id, ts.lexeme
        FOR UPDATE;
        UPDATE knowledge_termstatistic ts SET df = ts.df - d.n
        FROM (
            SELECT c.tenant_id, t.lexeme, count(*) AS n
            FROM unnest(tenant_ids, freqs) AS c(tenant_id, term_freqs), jsonb_object_keys(c.term_freqs) AS t(lexeme)
            GROUP BY c.tenant_id, t.lexeme
        ) AS d
        WHERE ts.tenant_id = d.tenant_id AND ts.lexeme = d.lexeme;
        DELETE FROM knowledge_termstatistic WHERE tenant_id = ANY(tenant_ids) AND df = 0;

        UPDATE knowledge_corpusstatistic cs
        SET chunk_count = cs.chunk_count - d.n, term_count = cs.term_count - d.len
        FROM (
            SELECT c.tenant_id, count(*) AS n, sum(c.len) AS len
            FROM unnest(tenant_ids, lengths) AS c(tenant_id, len)
            GROUP BY c.tenant_id
        ) AS d
        WHERE cs.tenant_id = d.tenant_id;
    END IF;
END
$$;

CREATE OR REPLACE FUNCTION kb_chunk_statistics_insert() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM kb_chunk_statistics_apply(1, array_agg(tenant_id), array_agg(id), array_agg(term_freqs), array_agg(term_count))
    FROM new_chunks HAVING count(*) > 0;
    RETURN NULL;
END
$$;

CREATE OR REPLACE FUNCTION kb_chunk_statistics_delete() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM kb_chunk_statistics_apply(-1, array_agg(tenant_id), array_agg(id), array_agg(term_freqs), array_agg(term_count))
    FROM old_chunks HAVING count(*) > 0;
    RETURN NULL;
END
$$;

CREATE OR REPLACE FUNCTION kb_chunk_statistics_update() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM kb_chunk_statistics_apply(-1, array_agg(tenant_id), array_agg(id), array_agg(term_freqs), array_agg(term_count))
    FROM old_chunks HAVING count(*) > 0;
    PERFORM kb_chunk_statistics_apply(1, array_agg(tenant_id), array_agg(id), array_agg(term_freqs), array_agg(term_count))
    FROM new_chunks HAVING count(*) > 0;
    RETURN NULL;
END
$$;

DROP TRIGGER IF EXISTS chunk_statistics_insert ON knowledge_chunk;
CREATE TRIGGER chunk_statistics_insert AFTER INSERT ON knowledge_chunk
    REFERENCING NEW TABLE AS new_chunks FOR EACH STATEMENT EXECUTE FUNCTION kb_chunk_statistics_insert();
DROP TRIGGER IF EXISTS chunk_statistics_delete ON knowledge_chunk;
CREATE TRIGGER chunk_statistics_delete AFTER DELETE ON knowledge_chunk
    REFERENCING OLD TABLE AS old_chunks FOR EACH STATEMENT EXECUTE FUNCTION kb_chunk_statistics_delete();
DROP TRIGGER IF EXISTS chunk_statistics_update ON knowledge_chunk;
CREATE TRIGGER chunk_statistics_update AFTER UPDATE ON knowledge_chunk
    REFERENCING OLD TABLE AS old_chunks NEW TABLE AS new_chunks
    FOR EACH STATEMENT EXECUTE FUNCTION kb_chunk_statistics_update();
