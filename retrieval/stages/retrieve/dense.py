"""Dense retriever: nearest chunks by cosine similarity of embeddings (pgvector).

Two plans, chosen per query by whether the tenant has its own HNSW index
(``knowledge.vector_index``: tenants with at least ``TENANT_INDEX_MIN_CHUNKS`` chunks of the
embedder get one after ingestion):

* **tenant HNSW**: ``ORDER BY embedding::vector(D) <=> q`` with the tenant id and embedder key
  written as SQL literals, so the planner can prove the partial index's predicate
  (``embedder = '<key>' AND tenant_id = <id>``) whatever the driver's parameter binding
  (server-side binding or a generic plan would hide a bound value). The graph holds the
  tenant's chunks only, so latency does not grow with other tenants' data. pgvector's iterative
  scan keeps returning neighbours until ``limit`` rows pass a source filter; ``ef_search`` is at
  least ``limit`` so recall@limit stays that of an exact scan within measurement
  (``benchmarks/scale.py``, ``recall_at_100``).
* **exact**: ``ORDER BY embedding <=> q`` (no cast, so no HNSW index matches) over the tenant's
  rows found through ``chunk_tenant_embedder_idx``: a top-k sort of every candidate, perfect
  recall, and as fast as a graph walk for small tenants (crossover measured by
  ``benchmarks/multi_tenant.py``).

Both plans apply the shared ``RetrievalFilter`` inside the SQL, and skip chunks still waiting for
their embedding (NULL while the embedding task of ``KB_EMBED_QUEUE`` has not reached them; BM25
finds those meanwhile).
"""

from __future__ import annotations

from django.db import transaction
from psycopg import sql

from core.replicas import read_connection
from knowledge.vector_index import vector_index_name
from retrieval.filters import RetrievalFilter
from retrieval.types import Ranking

PLANS = ("auto", "hnsw", "exact")


def vector_search(
    *,
    where: RetrievalFilter,
    embedder: str,
    vector,
    limit: int,
    ef_search: int = 100,
    plan: str = "auto",
) -> Ranking:
    """Chunk ids and cosine similarities of the nearest chunks ``where`` allows, best first.

    ``vector`` is a sequence of floats whose length is the embedder's dimension; only chunks
    embedded by ``embedder`` are compared. Returns at most ``limit`` ``(chunk_id, similarity)``
    pairs; similarity is 1 - cosine distance, in [-1, 1]. ``plan`` is ``auto`` (the tenant's
    HNSW index when it has a valid one, else the exact scan), or ``hnsw``/``exact`` to force one
    (benchmarks; ``hnsw`` without a tenant index falls back to the embedder's shared index).
    ``ValueError`` for an unknown plan.
    """
    if plan not in PLANS:
        raise ValueError(f"Unknown dense plan {plan!r}; use one of {', '.join(PLANS)}.")
    # Inside a caller's transaction (ATOMIC_REQUESTS, a benchmark's rolled-back block) the
    # settings below would outlive this search: enable_sort = off then turned later statements'
    # sorts into nested loops (the access scope query took seconds, benchmarks/access_latency.py).
    # So enable_sort is restored afterwards there; the hnsw.* settings only affect vector searches.
    connection = read_connection()  # a replica in a marked read path (core.replicas)
    outer = connection.in_atomic_block
    with transaction.atomic(using=connection.alias), connection.cursor() as cursor:
        # One round trip: the search settings (transaction-local) and whether the tenant index exists.
        # enable_sort = off: the planner's cost model ignores that reading each row's embedding
        # goes through TOAST, and would pick "scan the tenant + top-k sort" over the tenant's
        # index for tenants of a few thousand chunks, 6x slower (87 vs 13 ms at 5k chunks,
        # benchmarks/multi_tenant.py). The exact plan has no alternative to its sort, so keeps it.
        cursor.execute(
            "WITH before AS MATERIALIZED (SELECT current_setting('enable_sort') AS enable_sort)"
            " SELECT set_config('hnsw.iterative_scan', 'relaxed_order', true),"
            " set_config('enable_sort', 'off', true),"
            " set_config('hnsw.ef_search', %s, true),"
            " EXISTS (SELECT 1 FROM pg_class c JOIN pg_index i ON i.indexrelid = c.oid"
            "         WHERE c.relname = %s AND i.indisvalid),"
            " before.enable_sort FROM before",
            [str(max(int(ef_search), int(limit))), vector_index_name(embedder, where.tenant_id)],
        )
        _, _, _, indexed, enable_sort = cursor.fetchone()
        chosen = "exact" if plan == "exact" or (plan == "auto" and not indexed) else "hnsw"
        statement, params = vector_search_sql(where=where, embedder=embedder, vector=vector, limit=limit, plan=chosen)
        cursor.execute(statement, params)
        rows = cursor.fetchall()
        if outer:
            cursor.execute("SELECT set_config('enable_sort', %s, true)", [enable_sort])
    # relaxed_order may return slightly out-of-order rows; restore exact order.
    return sorted(((row[0], float(row[1])) for row in rows), key=lambda pair: -pair[1])


def vector_search_sql(*, where: RetrievalFilter, embedder: str, vector, limit: int, plan: str) -> tuple[str, dict]:
    """The SQL text and named parameters of one dense plan (``hnsw`` or ``exact``; see module docstring).

    Exposed so tests and benchmarks can ``EXPLAIN`` exactly what ``vector_search`` runs.
    """
    dims = len(vector)
    literal = "[" + ",".join(f"{x:.7g}" for x in vector) + "]"
    if plan == "hnsw":
        distance = sql.SQL("(c.embedding::vector({dims}) <=> %(vector)s::vector({dims}))").format(
            dims=sql.Literal(dims)
        )
    else:
        distance = sql.SQL("(c.embedding <=> %(vector)s::vector)")
    statement = sql.SQL(
        "SELECT c.id, 1 - {distance} AS score FROM knowledge_chunk c"
        " WHERE c.embedder = {embedder} AND c.tenant_id = {tenant} AND c.embedding IS NOT NULL AND {condition}"
        " ORDER BY {distance} LIMIT %(limit)s"
    ).format(
        distance=distance,
        embedder=sql.Literal(embedder),
        tenant=sql.Literal(int(where.tenant_id)),
        condition=where.chunk_condition("c"),
    )
    params = {**where.params(), "vector": literal, "limit": int(limit)}
    return statement.as_string(None), params
