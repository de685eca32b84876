"""Near-duplicate and exact-duplicate reads for retrieval (``retrieval.stages.rerank.near_duplicates``)."""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from django.db import connection, transaction

from knowledge.models import DocumentVersion
from knowledge.models.dedup import NearDuplicateMember, NearDuplicatePair


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


_PLACE_FIELDS = (
    "id",
    "number",
    "document_id",
    "document__external_id",
    "document__title",
    "document__uri",
    "document__source__name",
    "document__source_id",
    "published_at",
    "ingested_at",
)


def _place(row) -> Place:
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


def duplicates_for_versions(*, tenant, version_ids: list[int], near: bool = True) -> Duplicates:
    """Exact and (when ``near``) near duplicates of ``version_ids`` in ``tenant`` only (3 queries at most).

    Only current versions count as places and as cluster members.
    """
    found = Duplicates()
    if not version_ids:
        return found
    versions = DocumentVersion.objects.for_tenant(tenant)
    for row in (
        versions.filter(is_current=True, duplicate_of_id__in=version_ids)
        .order_by("document__external_id")
        .values_list("duplicate_of_id", *_PLACE_FIELDS)
    ):
        found.also_in.setdefault(row[0], []).append(_place(row[1:]))
    if not near:
        return found
    clustered = NearDuplicateMember.objects.for_tenant(tenant)
    cluster_ids = set(clustered.filter(version_id__in=version_ids).values_list("cluster_id", flat=True))
    if not cluster_ids:
        return found
    rows = list(
        clustered.filter(cluster_id__in=cluster_ids, version__is_current=True).values_list(
            "cluster_id", *(f"version__{name}" if name != "id" else "version_id" for name in _PLACE_FIELDS)
        )
    )
    for row in rows:
        place = _place(row[1:])
        found.cluster_of[place.version_id] = row[0]
        found.members.setdefault(row[0], []).append(place)
    member_ids = list(found.cluster_of)
    for older, newer, kind, update in (
        NearDuplicatePair.objects.for_tenant(tenant)
        .filter(older_id__in=member_ids, newer_id__in=member_ids, status=NearDuplicatePair.Status.DUPLICATE)
        .values_list("older_id", "newer_id", "kind", "update")
    ):
        found.pairs[(min(older, newer), max(older, newer))] = (kind, update, older)
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
