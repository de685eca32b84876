-- Okapi BM25 over a tenant's chunks (see retrieval/search.py lexical_candidates).
-- Parameters: query, tenant, k1, b, limit; {source_filter} is an optional extra condition on c.
WITH q AS (
    SELECT ts.lexeme,
           ln(1 + (s.chunk_count - ts.df + 0.5) / (ts.df + 0.5)) AS idf,
           s.term_count::float8 / GREATEST(s.chunk_count, 1) AS avgdl
    FROM (SELECT DISTINCT lexeme FROM unnest(to_tsvector('english', %(query)s))) AS ql
    JOIN knowledge_termstatistic ts ON ts.tenant_id = %(tenant)s AND ts.lexeme = ql.lexeme AND ts.df > 0
    JOIN knowledge_corpusstatistic s ON s.tenant_id = %(tenant)s
), matches AS (
    SELECT c.id, c.term_freqs, c.term_count
    FROM knowledge_chunk c
    WHERE c.tenant_id = %(tenant)s
      AND c.search_vector @@ (
          -- OR of the known query lexemes, each quoted for tsquery (quotes and backslashes doubled).
          SELECT to_tsquery('simple', string_agg(
              '''' || replace(replace(lexeme, '\', '\\'), '''', '''''') || '''', ' | '))
          FROM q)
      {source_filter}
)
SELECT m.id,
       SUM(q.idf * f.tf * (%(k1)s + 1) / (f.tf + %(k1)s * (1 - %(b)s + %(b)s * m.term_count / q.avgdl))) AS score
FROM matches m
CROSS JOIN q
CROSS JOIN LATERAL (SELECT (m.term_freqs ->> q.lexeme)::float8 AS tf) AS f
WHERE f.tf IS NOT NULL
GROUP BY m.id
ORDER BY score DESC, m.id
LIMIT %(limit)s
