"""HNSW indexes over ``knowledge_chunk.embedding``: one per embedder, one per large tenant.

The ``embedding`` column has no fixed dimension so tenants can use different embedding models.
pgvector indexes need one, so indexes are partial expression indexes over
``embedding::vector(D)`` and dense search orders by exactly that expression (pgvector docs,
"Indexing vectors with different dimensions"):

* per embedder (created by migration 0001 for ``local``, by ``vector_index_ensure`` for others):
  ``USING hnsw ((embedding::vector(D)) vector_cosine_ops) WHERE embedder = '<key>'``;
* per tenant, for tenants with at least ``TENANT_INDEX_MIN_CHUNKS`` chunks of an embedder
  (``tenant_vector_index_ensure``, called after ingestion): the same index
  ``WHERE embedder = '<key>' AND tenant_id = <id>``. A tenant's dense search walks a graph of
  its own chunks only, so its latency does not grow with other tenants' data
  (``benchmarks/multi_tenant.py``). Below the threshold dense search scans the tenant's rows
  exactly (``retrieval.stages.retrieve.dense``), which is as fast there and has perfect recall.

Indexes are created at run time, not by migrations: ``CREATE INDEX CONCURRENTLY`` outside a
transaction (ingestion in a worker or a command), a plain ``CREATE INDEX`` inside one (tests,
callers holding a transaction). A tenant index is named after the tenant's id; tenant ids are
never reused, so the index of a deleted tenant is empty and harmless, and
``tenant_vector_indexes_prune`` (run by every ensure) drops it.

Only the tables' owner may create or drop an index of ``knowledge_chunk``. The application connects
as the runtime role, which owns nothing (``core.db_roles``): it builds and drops them through the
owner's functions ``kb_vector_index_create`` and ``kb_vector_index_drop`` (core migration 0006),
which run the same statements without ``CONCURRENTLY`` (a function runs inside a transaction):
a build then holds writes to ``knowledge_chunk`` (searches go on) until it ends. A connection as
the owner (the test suite) runs them itself, concurrently outside a transaction.
"""

from __future__ import annotations

import hashlib
import re

from django.db import connection
from psycopg import sql

from core.models import Tenant
from core.rls import rls_bypass

# Chunks of one embedder a tenant needs before it gets its own HNSW index. The exact scan reads
# every row's embedding through TOAST (~16 us a row), so HNSW wins from a few hundred chunks on
# (benchmarks/multi_tenant.py "crossover", 2 busy cores: exact/HNSW p50 12/7 ms at 500 chunks,
# 20/8 at 1k, 86/11 at 5k). Below 1k the exact scan stays within ~20 ms with perfect recall and
# the table carries no index (nor predicate check on every insert) for the many small tenants.
TENANT_INDEX_MIN_CHUNKS = 1_000

# Build settings for a tenant index: HNSW builds fastest when the graph fits in
# maintenance_work_mem (pgvector README, "Index build time"); 100k x 384-dim chunks need ~200 MB.
BUILD_MAINTENANCE_WORK_MEM = "512MB"

_TENANT_INDEX = re.compile(r"^chunk_emb_(?P<embedder>[a-z0-9]+)_t(?P<tenant>\d+)_hnsw$")


def _embedder_slug(embedder_key: str) -> str:
    return "local" if embedder_key == "local" else hashlib.sha1(embedder_key.encode()).hexdigest()[:12]


def vector_index_name(embedder_key: str, tenant_id: int | None = None) -> str:
    """Stable index name: ``chunk_emb_local_hnsw`` per embedder, ``chunk_emb_local_t42_hnsw`` per tenant.

    Other embedders' keys are hashed (first 12 hex digits of SHA-1), so any key gives a valid
    identifier under PostgreSQL's 63-byte limit.
    """
    if tenant_id is None:
        return f"chunk_emb_{_embedder_slug(embedder_key)}_hnsw"
    return f"chunk_emb_{_embedder_slug(embedder_key)}_t{int(tenant_id)}_hnsw"


def vector_index_sql(
    embedder_key: str, dimensions: int, *, tenant_id: int | None = None, concurrently: bool = False
) -> str:
    """The ``CREATE INDEX [CONCURRENTLY] IF NOT EXISTS`` statement for an embedder (and tenant).

    Returns SQL text with every value a quoted literal: partial-index predicates must be
    constants, and a query can only use the index when the planner sees the same constants.
    """
    predicate = sql.SQL("embedder = {key}").format(key=sql.Literal(embedder_key))
    if tenant_id is not None:
        predicate = sql.SQL("{} AND tenant_id = {}").format(predicate, sql.Literal(int(tenant_id)))
    statement = sql.SQL(
        "CREATE INDEX {concurrently} IF NOT EXISTS {name} ON knowledge_chunk USING hnsw "
        "((embedding::vector({dims})) vector_cosine_ops) WHERE {predicate}"
    ).format(
        concurrently=sql.SQL("CONCURRENTLY" if concurrently else ""),
        name=sql.Identifier(vector_index_name(embedder_key, tenant_id)),
        dims=sql.Literal(int(dimensions)),
        predicate=predicate,
    )
    return statement.as_string()


def _owns_chunks(cursor) -> bool:
    """Whether the connection's role may run DDL on ``knowledge_chunk`` itself: it owns the table
    (or is a member of its owner, or a superuser). Otherwise it is the runtime role, and index DDL
    goes through the owner's functions."""
    cursor.execute(
        "SELECT pg_has_role(current_user, relowner, 'USAGE') FROM pg_class WHERE oid = 'knowledge_chunk'::regclass"
    )
    return bool(cursor.fetchone()[0])


@rls_bypass()  # DDL: the tables' owner builds and drops indexes (core.rls)
def vector_index_ensure(*, embedder_key: str, dimensions: int) -> None:
    """Create the HNSW index for ``embedder_key`` over all tenants if it does not exist yet (idempotent)."""
    name = vector_index_name(embedder_key)
    with connection.cursor() as cursor:
        cursor.execute("SELECT 1 FROM pg_indexes WHERE indexname = %s", [name])
        if cursor.fetchone() is None:
            if _owns_chunks(cursor):
                cursor.execute(vector_index_sql(embedder_key, dimensions))
            else:
                cursor.execute("SELECT kb_vector_index_create(%s, %s, %s)", [name, embedder_key, int(dimensions)])


def tenant_vector_index_exists(*, tenant_id: int, embedder_key: str) -> bool:
    """True when the tenant's own HNSW index for ``embedder_key`` exists and is valid (usable by queries).

    An index left invalid by an interrupted ``CREATE INDEX CONCURRENTLY`` counts as missing.
    """
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT i.indisvalid FROM pg_class c JOIN pg_index i ON i.indexrelid = c.oid"
            " WHERE c.relname = %s AND c.relkind = 'i'",
            [vector_index_name(embedder_key, tenant_id)],
        )
        row = cursor.fetchone()
    return bool(row and row[0])


@rls_bypass()  # DDL: the tables' owner builds and drops indexes (core.rls)
def tenant_vector_index_ensure(*, tenant_id: int, embedder_key: str, min_chunks: int | None = None) -> str | None:
    """Give the tenant its own HNSW index for ``embedder_key`` once it has ``min_chunks`` chunks.

    Idempotent and safe to call after every ingestion: counts the tenant's chunks of that
    embedder (index-only scan of ``chunk_tenant_embedder_idx``), returns ``None`` below
    ``min_chunks`` (default ``TENANT_INDEX_MIN_CHUNKS``), else the index name after making
    sure it exists and is valid (an invalid one, left by an interrupted concurrent build, is
    dropped and rebuilt). Concurrent callers serialize on an advisory lock named after the
    index. The dimension is read from the tenant's chunks. Also drops indexes of deleted
    tenants (``tenant_vector_indexes_prune``). A failed build raises the database error; the
    chunks stay stored and searchable on the exact path, and the next call retries.

    Building takes time roughly proportional to the tenant's chunks (56 s for 100k 384-dim
    chunks on 2 busy cores, 205 MB, ``benchmarks/scale.py``); outside a transaction the build
    is ``CONCURRENTLY`` and searches keep running on the exact path meanwhile.
    """
    tenant_vector_indexes_prune()
    name = vector_index_name(embedder_key, tenant_id)
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM knowledge_chunk WHERE tenant_id = %s AND embedder = %s",
            [tenant_id, embedder_key],
        )
        threshold = TENANT_INDEX_MIN_CHUNKS if min_chunks is None else min_chunks
        if cursor.fetchone()[0] < threshold:
            return None
        if tenant_vector_index_exists(tenant_id=tenant_id, embedder_key=embedder_key):
            return name
        cursor.execute(
            "SELECT vector_dims(embedding) FROM knowledge_chunk"
            " WHERE tenant_id = %s AND embedder = %s AND embedding IS NOT NULL LIMIT 1",
            [tenant_id, embedder_key],
        )
        dimensions = cursor.fetchone()[0]
        in_transaction = connection.in_atomic_block
        owner = _owns_chunks(cursor)
        concurrently = owner and not in_transaction
        lock_key = int(hashlib.sha1(name.encode()).hexdigest()[:15], 16)
        if not in_transaction:
            cursor.execute("SELECT pg_advisory_lock(%s)", [lock_key])
        else:
            # Inside a transaction: the lock ends with it; deferred foreign-key checks of chunks
            # inserted earlier in it must run first (CREATE INDEX refuses pending trigger events).
            cursor.execute("SELECT pg_advisory_xact_lock(%s)", [lock_key])
            cursor.execute("SET CONSTRAINTS ALL IMMEDIATE")
        try:
            if not tenant_vector_index_exists(tenant_id=tenant_id, embedder_key=embedder_key):
                _index_drop(cursor, name, concurrently=concurrently, owner=owner)
                cursor.execute(f"SET maintenance_work_mem = '{BUILD_MAINTENANCE_WORK_MEM}'")
                try:
                    if owner:
                        cursor.execute(
                            vector_index_sql(embedder_key, dimensions, tenant_id=tenant_id, concurrently=concurrently)
                        )
                    else:
                        cursor.execute(
                            "SELECT kb_vector_index_create(%s, %s, %s, %s)",
                            [name, embedder_key, int(dimensions), int(tenant_id)],
                        )
                finally:
                    if not in_transaction:  # inside a transaction, a failure aborts it (and the setting)
                        cursor.execute("RESET maintenance_work_mem")
            if in_transaction:
                cursor.execute("RESET maintenance_work_mem")
                cursor.execute("SET CONSTRAINTS ALL DEFERRED")
        finally:
            if not in_transaction:
                cursor.execute("SELECT pg_advisory_unlock(%s)", [lock_key])
    return name


def tenant_vector_indexes(*, tenant_id: int | None = None) -> list[dict]:
    """The per-tenant HNSW indexes: ``[{"name", "tenant_id", "valid", "bytes"}]``, by name.

    ``tenant_id`` limits the list to one tenant's indexes.
    """
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT c.relname, i.indisvalid, pg_relation_size(c.oid) FROM pg_class c"
            " JOIN pg_index i ON i.indexrelid = c.oid"
            " WHERE i.indrelid = 'knowledge_chunk'::regclass AND c.relname LIKE %s ORDER BY c.relname",
            ["chunk_emb_%_hnsw"],
        )
        rows = cursor.fetchall()
    found = []
    for name, valid, size in rows:
        match = _TENANT_INDEX.match(name)
        if match and (tenant_id is None or int(match["tenant"]) == int(tenant_id)):
            found.append({"name": name, "tenant_id": int(match["tenant"]), "valid": valid, "bytes": size})
    return found


@rls_bypass()  # DDL: the tables' owner builds and drops indexes (core.rls)
def tenant_vector_indexes_prune(*, tenant_id: int | None = None) -> list[str]:
    """Drop the per-tenant indexes of tenants that no longer exist (or all of ``tenant_id``'s).

    Returns the dropped index names. Called by ``tenant_vector_index_ensure`` and by
    ``knowledge.services.tenants.tenant_delete``; a tenant deleted any other way leaves an
    index whose predicate matches no row (ids are never reused): harmless until pruned.
    """
    indexes = tenant_vector_indexes(tenant_id=tenant_id)
    if tenant_id is None:
        existing = set(Tenant.objects.filter(pk__in={i["tenant_id"] for i in indexes}).values_list("pk", flat=True))
        indexes = [i for i in indexes if i["tenant_id"] not in existing]
    in_transaction = connection.in_atomic_block
    with connection.cursor() as cursor:
        owner = _owns_chunks(cursor) if indexes else True
        if indexes and in_transaction:
            cursor.execute("SET CONSTRAINTS ALL IMMEDIATE")
        for index in indexes:
            _index_drop(cursor, index["name"], concurrently=owner and not in_transaction, owner=owner)
        if indexes and in_transaction:
            cursor.execute("SET CONSTRAINTS ALL DEFERRED")
    return [i["name"] for i in indexes]


def _index_drop(cursor, name: str, *, concurrently: bool, owner: bool = True) -> None:
    """Drop the tenant index ``name`` if it exists: itself as the owner, else through the owner's
    function ``kb_vector_index_drop``."""
    if not owner:
        cursor.execute("SELECT kb_vector_index_drop(%s)", [name])
        return
    drop = "DROP INDEX CONCURRENTLY IF EXISTS" if concurrently else "DROP INDEX IF EXISTS"
    cursor.execute(sql.SQL(f"{drop} {{}}").format(sql.Identifier(name)).as_string())
