"""Per-embedder HNSW indexes over ``knowledge_chunk.embedding``.

The ``embedding`` column has no fixed dimension so tenants can use different embedding models.
pgvector indexes need one, so each embedder gets a partial expression index:
``USING hnsw ((embedding::vector(D)) vector_cosine_ops) WHERE embedder = '<key>'``, and dense
search orders by exactly that expression (pgvector docs, "Indexing vectors with different
dimensions").
"""

from __future__ import annotations

import hashlib

from django.db import connection
from psycopg import sql


def vector_index_name(embedder_key: str) -> str:
    """Stable index name for an embedder key, e.g. ``chunk_emb_local_hnsw``."""
    if embedder_key == "local":
        return "chunk_emb_local_hnsw"
    return f"chunk_emb_{hashlib.sha1(embedder_key.encode()).hexdigest()[:12]}_hnsw"


def vector_index_sql(embedder_key: str, dimensions: int) -> str:
    """The ``CREATE INDEX IF NOT EXISTS`` statement for an embedder (string with literals quoted)."""
    statement = sql.SQL(
        "CREATE INDEX IF NOT EXISTS {name} ON knowledge_chunk USING hnsw "
        "((embedding::vector({dims})) vector_cosine_ops) WHERE embedder = {key}"
    ).format(
        name=sql.Identifier(vector_index_name(embedder_key)),
        dims=sql.Literal(int(dimensions)),
        key=sql.Literal(embedder_key),
    )
    return statement.as_string()


def vector_index_ensure(*, embedder_key: str, dimensions: int) -> None:
    """Create the HNSW index for ``embedder_key`` if it does not exist yet (idempotent)."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT 1 FROM pg_indexes WHERE indexname = %s", [vector_index_name(embedder_key)])
        if cursor.fetchone() is None:
            cursor.execute(vector_index_sql(embedder_key, dimensions))
