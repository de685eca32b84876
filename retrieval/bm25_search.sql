-- Okapi BM25 over a tenant's chunks (see retrieval/search.py lexical_candidates).
-- Parameters: query, tenant, k1, b, limit; {source_filter} is an optional extra condition on p.
-- Walks the postings (inverted index, primary key tenant, lexeme, chunk) of the query's lexemes.
-- q is materialized so IDF is computed once per query lexeme, in float8 (not numeric).
WITH q AS MATERIALIZED (
    SELECT ts.lexeme,
           ln(1.0::float8 + (s.chunk_count - ts.df + 0.5::float8) / (ts.df + 0.5::float8)) AS idf,
           s.term_count::float8 / GREATEST(s.chunk_count, 1) AS avgdl
    FROM (SELECT DISTINCT lexeme FROM unnest(to_tsvector('english', %(query)s))) AS ql
    JOIN knowledge_termstatistic ts ON ts.tenant_id = %(tenant)s AND ts.lexeme = ql.lexeme AND ts.df > 0
    JOIN knowledge_corpusstatistic s ON s.tenant_id = %(tenant)s
)
SELECT p.chunk_id,
       SUM(q.idf * p.tf * (%(k1)s::float8 + 1)
           / (p.tf + %(k1)s::float8 * (1 - %(b)s::float8 + %(b)s::float8 * p.chunk_length / q.avgdl))) AS score
FROM q
JOIN knowledge_posting p ON p.tenant_id = %(tenant)s AND p.lexeme = q.lexeme
WHERE TRUE {source_filter}
GROUP BY p.chunk_id
ORDER BY score DESC, p.chunk_id
LIMIT %(limit)s
