"""Retrievers: BM25 over the postings (lexical) and pgvector HNSW (dense), sharing one filter."""
