"""Near-duplicate and exact-duplicate reads for retrieval (``retrieval.stages.rerank.near_duplicates``)."""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from django.db import connection, transaction

from knowledge.models.dedup import NearDuplicatePair


@dataclass
class Place:
    """Where a content appears: a version of a document in a source (JSON: ``as_dict``)."""

    version_id: int
    number: int
    document_id: int
    document: str
    title: str
    uri: str
    source: str
    source_id: int
    published_at: object
    ingested_at: object

    @property
    def freshness(self) -> tuple:
        """Sort key, freshest last: dated before undated, then ``published_at``, ingestion time, id."""
        published = self.published_at
        return (published is not None, published.timestamp() if published else 0.0, self.ingested_at, self.version_id)

    def as_dict(self) -> dict:
        return {
            "document": self.document,
            "document_id": self.document_id,
            "title": self.title,
            "uri": self.uri,
            "source": self.source,
            "version": self.number,
            "published_at": self.published_at.isoformat() if self.published_at else None,
        }


@dataclass
class Duplicates:
    """The duplicates of some versions: exact (``also_in``) and near (clusters).

    ``also_in[v]``: the other current places holding version ``v``'s exact content;
    ``cluster_of[v]``: v's cluster id; ``members[c]``: the places of cluster ``c``'s members;
    ``pairs[(a, b)]`` (``a < b``): ``(kind, update, older version id)`` of a stored pair.
    """

    also_in: dict[int, list[Place]] = field(default_factory=dict)
    cluster_of: dict[int, int] = field(default_factory=dict)
    members: dict[int, list[Place]] = field(default_factory=dict)
    pairs: dict[tuple[int, int], tuple[str, str, int]] = field(default_factory=dict)


def _place(row) -> Place:
    """A ``Place`` from the ten place columns of ``_DUPLICATES`` (``_PLACE_SQL``), in field order."""
    return Place(*row)


def tenant_has_duplicates(*, tenant) -> bool:
    """Whether ``tenant`` has a near-duplicate cluster or a current exact duplicate (one query)."""
    tenant_id = tenant if isinstance(tenant, int) else tenant.pk
    with connection.cursor() as cursor:
        cursor.execute(
            """
            SELECT EXISTS (SELECT 1 FROM knowledge_nearduplicatecluster WHERE tenant_id = %(tenant)s)
                OR EXISTS (
                    SELECT 1 FROM knowledge_documentversion v JOIN knowledge_document d ON d.id = v.document_id
                    WHERE d.tenant_id = %(tenant)s AND v.is_current AND v.duplicate_of_id IS NOT NULL
                )
            """,
            {"tenant": tenant_id},
        )
        return bool(cursor.fetchone()[0])


# Tenant id -> (checked at, monotonic seconds; whether the tenant holds a duplicate), kept per
# process for DUPLICATES_TTL_S so a search pays no query for it (``tenant_has_duplicates_recent``).
# This process forgets a tenant as soon as it records a duplicate there
# (``tenant_duplicates_changed``); other processes see it within the TTL.
DUPLICATES_TTL_S = 30.0
_duplicates_seen: dict[int, tuple[float, bool]] = {}


def tenant_has_duplicates_recent(*, tenant) -> bool:
    """``tenant_has_duplicates``, answered from this process's memory when it was asked less than
    ``DUPLICATES_TTL_S`` seconds ago (and no duplicate was recorded here since): what search asks
    on every run. ``tenant`` is a ``Tenant`` or its id."""
    tenant_id = tenant if isinstance(tenant, int) else tenant.pk
    now = time.monotonic()
    seen = _duplicates_seen.get(tenant_id)
    if seen is None or now - seen[0] >= DUPLICATES_TTL_S:
        seen = _duplicates_seen[tenant_id] = (now, tenant_has_duplicates(tenant=tenant_id))
    return seen[1]


def tenant_duplicates_changed(*, tenant) -> None:
    """Forget what ``tenant_has_duplicates_recent`` knows of ``tenant`` (a ``Tenant`` or its id):
    now, and again when the current transaction commits (a search in between could have read the
    state before it). Called by whatever records a duplicate or a near-duplicate cluster."""
    tenant_id = tenant if isinstance(tenant, int) else tenant.pk
    _duplicates_seen.pop(tenant_id, None)
    transaction.on_commit(lambda: _duplicates_seen.pop(tenant_id, None))


# The places of versions (exact duplicates of the wanted versions, and the current members of their
# near-duplicate clusters) and the stored pairs among those members, in one statement: each row is
# (part, key, other, kind, update, *place); "also" rows are keyed by the version they duplicate,
# "member" rows by their cluster, "pair" rows by their older version (other: the newer one).
_PLACE_SQL = (
    "v.id, v.number, v.document_id, d.external_id::text, d.title::text, d.uri::text, s.name::text,"
    " d.source_id, v.published_at, v.ingested_at"
)
_NO_PLACE_SQL = (
    "NULL::bigint, NULL::integer, NULL::bigint, NULL::text, NULL::text, NULL::text, NULL::text,"
    " NULL::bigint, NULL::timestamptz, NULL::timestamptz"
)
_DUPLICATES = f"""
WITH members AS MATERIALIZED (
    SELECT m.cluster_id, m.version_id FROM knowledge_nearduplicatemember m
    WHERE %(near)s AND m.tenant_id = %(tenant)s AND m.cluster_id IN (
        SELECT w.cluster_id FROM knowledge_nearduplicatemember w
        WHERE w.tenant_id = %(tenant)s AND w.version_id = ANY(%(versions)s::bigint[]))
)
SELECT 'also' AS part, v.duplicate_of_id AS key, NULL::bigint, NULL::text, NULL::text, {_PLACE_SQL}
FROM knowledge_documentversion v
JOIN knowledge_document d ON d.id = v.document_id AND d.tenant_id = %(tenant)s
JOIN knowledge_source s ON s.id = d.source_id
WHERE v.is_current AND v.duplicate_of_id = ANY(%(versions)s::bigint[])
UNION ALL
SELECT 'member', m.cluster_id, NULL::bigint, NULL::text, NULL::text, {_PLACE_SQL}
FROM members m
JOIN knowledge_documentversion v ON v.id = m.version_id AND v.is_current
JOIN knowledge_document d ON d.id = v.document_id AND d.tenant_id = %(tenant)s
JOIN knowledge_source s ON s.id = d.source_id
UNION ALL
SELECT 'pair', p.older_id, p.newer_id, p.kind::text, p.update::text, {_NO_PLACE_SQL}
FROM knowledge_nearduplicatepair p
WHERE p.tenant_id = %(tenant)s AND p.status = %(duplicate)s
  AND p.older_id IN (SELECT version_id FROM members) AND p.newer_id IN (SELECT version_id FROM members)
ORDER BY 1, 2, 9, 6
"""


def duplicates_for_versions(*, tenant, version_ids: list[int], near: bool = True) -> Duplicates:
    """Exact and (when ``near``) near duplicates of ``version_ids`` in ``tenant`` only: one query.

    ``tenant`` is a ``Tenant`` or its id. Only current versions count as places and as cluster
    members; ``also_in[v]`` lists the places of ``v``'s exact content by document ``external_id``,
    ``members[c]`` cluster ``c``'s members by version id, and ``pairs`` the stored near-duplicate
    pairs (status duplicate) among those members. Search runs it on every result list of a tenant
    with duplicates (``retrieval.stages.rerank.near_duplicates``), hence one statement instead of
    one per part.
    """
    found = Duplicates()
    if not version_ids:
        return found
    tenant_id = tenant if isinstance(tenant, int) else tenant.pk
    with connection.cursor() as cursor:
        cursor.execute(
            _DUPLICATES,
            {
                "tenant": tenant_id,
                "versions": list(version_ids),
                "near": near,
                "duplicate": NearDuplicatePair.Status.DUPLICATE.value,
            },
        )
        rows = cursor.fetchall()
    for part, key, other, kind, update, *place in rows:
        if part == "also":
            found.also_in.setdefault(key, []).append(_place(place))
        elif part == "member":
            member = _place(place)
            found.cluster_of[member.version_id] = key
            found.members.setdefault(key, []).append(member)
        else:
            found.pairs[(min(key, other), max(key, other))] = (kind, update, key)
    return found


def chunks_nearest_in_versions(
    *, tenant, wanted: dict[int, list[int]], condition=None, params=None
) -> dict[int, tuple[int, int]]:
    """For each chunk id of ``wanted``, the ``(version id, chunk id)`` of the chunk closest to it
    (cosine distance of the embeddings, pgvector ``<=>``) in the first of its version ids (in
    order) that holds a chunk meeting ``condition``; chunks with no such version are left out.

    ``wanted``: ``{chunk id: [version id, ...]}``, the versions in order of preference (the
    freshest member of a near-duplicate cluster first). Ties in distance go to the lower
    ``ordinal``. One query for all chunks: the (chunk, version, rank) triples are passed as three
    parallel arrays, every candidate chunk of each wanted version is joined to its query chunk,
    and ``DISTINCT ON`` keeps the best per query chunk (the first version by rank, then the
    nearest). ``condition`` is a ``psycopg.sql`` condition over the chunk alias ``c`` with named
    ``params`` (``RetrievalFilter.chunk_condition``: sources, versions, access rules), so a
    replacement is never a chunk the query could not have seen. Chunks are ``tenant``'s and
    embedded by the same model as their query chunk. Used to show the freshest member of a
    near-duplicate cluster in place of an older member's chunk.
    """
    from psycopg import sql

    chunk_ids, version_ids, ranks = [], [], []
    for chunk_id, versions in wanted.items():
        for rank, version_id in enumerate(versions):
            chunk_ids.append(chunk_id)
            version_ids.append(version_id)
            ranks.append(rank)
    if not chunk_ids:
        return {}
    tenant_id = tenant if isinstance(tenant, int) else tenant.pk
    query = sql.SQL(
        """
        SELECT DISTINCT ON (w.chunk_id) w.chunk_id, c.version_id, c.id
        FROM unnest(%(nd_chunks)s::bigint[], %(nd_versions)s::bigint[], %(nd_ranks)s::int[])
             AS w(chunk_id, version_id, rank)
        JOIN knowledge_chunk q ON q.id = w.chunk_id AND q.tenant_id = %(nd_tenant)s
        JOIN knowledge_chunk c ON c.version_id = w.version_id AND c.tenant_id = %(nd_tenant)s
             AND c.embedder = q.embedder
        WHERE {condition}
        ORDER BY w.chunk_id, w.rank, c.embedding <=> q.embedding, c.ordinal
        """
    ).format(condition=condition if condition is not None else sql.SQL("TRUE"))
    with connection.cursor() as cursor:
        cursor.execute(
            query,
            {
                **(params or {}),
                "nd_chunks": chunk_ids,
                "nd_versions": version_ids,
                "nd_ranks": ranks,
                "nd_tenant": tenant_id,
            },
        )
        return {chunk_id: (version_id, found) for chunk_id, version_id, found in cursor.fetchall()}
