"""Dense retriever: nearest chunks by cosine similarity of embeddings (pgvector HNSW).

Each embedder has a partial HNSW index over ``embedding::vector(D)`` (``knowledge.vector_index``);
the query repeats that expression so the planner uses it. pgvector's iterative scan keeps
returning neighbours until ``limit`` rows pass the filter.
"""

from __future__ import annotations

from django.db import connection, transaction
from psycopg import sql

from retrieval.stages.retrieve.filters import RetrievalFilter
from retrieval.types import Ranking


def vector_search(
    *,
    where: RetrievalFilter,
    embedder: str,
    vector,
    limit: int,
    ef_search: int = 100,
) -> Ranking:
    """Chunk ids and cosine similarities of the nearest chunks ``where`` allows, best first.

    ``vector`` is a sequence of floats whose length is the embedder's dimension; only chunks
    embedded by ``embedder`` are compared. Returns at most ``limit`` ``(chunk_id, similarity)``
    pairs; similarity is 1 - cosine distance, in [-1, 1].
    """
    dims = len(vector)
    literal = "[" + ",".join(f"{x:.7g}" for x in vector) + "]"
    distance = sql.SQL("(c.embedding::vector({dims}) <=> %(vector)s::vector({dims}))").format(dims=sql.Literal(dims))
    statement = sql.SQL(
        "SELECT c.id, 1 - {distance} AS score FROM knowledge_chunk c"
        " WHERE c.embedder = %(embedder)s AND {condition}"
        " ORDER BY {distance} LIMIT %(limit)s"
    ).format(distance=distance, condition=where.chunk_condition("c"))
    params = {**where.params(), "vector": literal, "embedder": embedder, "limit": int(limit)}
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute("SET LOCAL hnsw.iterative_scan = relaxed_order")
        cursor.execute(f"SET LOCAL hnsw.ef_search = {max(int(ef_search), int(limit))}")
        cursor.execute(statement.as_string(None), params)
        rows = cursor.fetchall()
    # relaxed_order may return slightly out-of-order rows; restore exact order.
    return sorted(((row[0], float(row[1])) for row in rows), key=lambda pair: -pair[1])
