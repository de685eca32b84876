"""Signal reranker ``near_duplicates`` (see ``retrieval.stages.rerank``, first in the chain).

Active when the tenant holds any duplicate (``tenant_has_duplicates_recent``: one query per tenant
and process every 30 s, not per run). Every
result is then annotated with where its content also appears:

* ``also_in``: the other documents holding the exact same content (``DocumentVersion.duplicate_of``;
  stored once, so they have no chunks of their own). The result is shown at the freshest of
  these places (``published_at``, then ingestion time), the others listed.
* ``near_duplicates``: the other members of its near-duplicate cluster (``knowledge.dedup``),
  freshest first, each with its pair's ``kind`` (meaningless or meaningful) and ``update``.

With collapsing on (``run.request.collapse``; None = the tenant's
``collapse_near_duplicates``, default on), a result from a cluster member that is not the
cluster's freshest is replaced by the freshest member's chunk nearest to it (cosine of
embeddings; one query for all such results), keeping its score and rank; a chunk already in the results is not repeated. So the
top k holds one copy of each page, the freshest, and ``update`` on it summarizes what changed
from the copy it supersedes ("PostgreSQL 12 -> PostgreSQL 14"; None when the change is
meaningless).
"""

from __future__ import annotations

from dataclasses import dataclass

from django.db import connection
from django.db.models.base import ModelState

from core.schema import setting
from knowledge.dedup.selectors import (
    Place,
    chunks_nearest_in_versions,
    duplicates_for_versions,
    tenant_has_duplicates_recent,
)
from knowledge.models import Chunk, Document, DocumentVersion, Source
from retrieval.stages.fetch import chunks_load

NAME = "near_duplicates"


@dataclass(frozen=True)
class Config:
    """Settings of the ``near_duplicates`` reranker."""

    collapse_near_duplicates: bool = setting(
        True,
        switch=True,
        doc="show one member of a near-duplicate cluster, the freshest (a request's `collapse` overrides)",
    )


_VERSION = Chunk._meta.get_field("version")
_DOCUMENT = DocumentVersion._meta.get_field("document")
_SOURCE = Document._meta.get_field("source")


def collapse_wanted(run) -> bool:
    """The request's ``collapse`` option, else the tenant's ``collapse_near_duplicates`` setting."""
    option = run.request.collapse
    if option is not None:
        return bool(option)
    return run.spec.of(Config).collapse_near_duplicates


def active(run) -> bool:
    """Whether the run's tenant holds any duplicate (a near-duplicate cluster or an exact duplicate):
    then results are annotated, and collapsed when wanted. Asked once per run (cached on it), and
    answered from the process's memory for ``DUPLICATES_TTL_S`` seconds
    (``knowledge.dedup.selectors.tenant_has_duplicates_recent``), so a search pays no query for it."""
    cached = run.memo.get(NAME)
    if cached is None:
        cached = run.memo[NAME] = tenant_has_duplicates_recent(tenant=run.tenant)
    return cached


def _deferred(model, db: str, **values):
    """A ``model`` row holding only ``values``; other fields load on first access (like ``only``)."""
    instance = model.__new__(model)
    instance.__dict__.update(values)
    instance._state = ModelState()
    instance._state.adding = False
    instance._state.db = db
    return instance


def _shown_at(chunk, place: Place, tenant_id: int):
    """A copy of ``chunk`` whose version, document and source are ``place``'s (an exact duplicate:
    same text, so offsets and neighbours still hold); the chunk's own id and version id are kept."""
    db = chunk._state.db or connection.alias
    source = _deferred(Source, db, id=place.source_id, tenant_id=tenant_id, name=place.source)
    document = _deferred(
        Document,
        db,
        id=place.document_id,
        tenant_id=tenant_id,
        source_id=place.source_id,
        external_id=place.document,
        uri=place.uri,
        title=place.title,
    )
    _SOURCE.set_cached_value(document, source)
    version = _deferred(
        DocumentVersion,
        db,
        id=place.version_id,
        document_id=place.document_id,
        number=place.number,
        published_at=place.published_at,
        is_current=True,
    )
    _DOCUMENT.set_cached_value(version, document)
    copy = _deferred(Chunk, db, **{k: v for k, v in chunk.__dict__.items() if k != "_state"})
    _VERSION.set_cached_value(copy, version)
    return copy


def _own_place(chunk) -> Place:
    version = chunk.version
    document = version.document
    return Place(
        version_id=version.pk,
        number=version.number,
        document_id=document.pk,
        document=document.external_id,
        title=document.title,
        uri=document.uri,
        source=document.source.name,
        source_id=document.source_id,
        published_at=version.published_at,
        ingested_at=None,
    )


def _fresh_key(place: Place) -> tuple:
    published = place.published_at
    return (published is not None, published.timestamp() if published else 0.0)


def rerank(run, results, *, k: int):
    """Annotate, and collapse when wanted (see the module docstring); ``(results, summary)``.

    ``summary``: ``{"collapse", "clusters", "replaced", "dropped", "also_in"}`` counts.
    """
    collapse = collapse_wanted(run)
    tenant_id = run.tenant.pk
    version_ids = sorted({r.chunk.version_id for r in results})
    dups = duplicates_for_versions(tenant=run.tenant, version_ids=version_ids)
    hidden = run.where.versions_hidden()  # access rules, and other conversations' attached files
    if hidden:  # places the asker may not see are never listed, nor collapsed to
        dups.also_in = {v: [p for p in places if p.version_id not in hidden] for v, places in dups.also_in.items()}
        dups.members = {c: [p for p in places if p.version_id not in hidden] for c, places in dups.members.items()}
    freshest = {cid: max(places, key=lambda p: p.freshness) for cid, places in dups.members.items()}

    replacements: dict[int, int] = {}  # result index -> chunk id of the freshest member
    if collapse:
        wanted: dict[int, list[int]] = {}  # result chunk id -> the fresher members' version ids, freshest first
        for result in results:
            own = result.chunk.version_id
            cid = dups.cluster_of.get(own)
            if cid is None or freshest[cid].version_id == own:
                continue
            own_key = next(p.freshness for p in dups.members[cid] if p.version_id == own)
            wanted[result.chunk.pk] = [
                p.version_id
                for p in sorted(dups.members[cid], key=lambda p: p.freshness, reverse=True)
                if p.freshness > own_key
            ]
        # The freshest member each result's query may see (sources, versions, access rules): one query.
        found = chunks_nearest_in_versions(
            tenant=tenant_id, wanted=wanted, condition=run.where.chunk_condition("c"), params=run.where.params()
        )
        replacements = {i: found[r.chunk.pk][1] for i, r in enumerate(results) if r.chunk.pk in found}
    loaded = chunks_load(tenant=run.tenant, chunk_ids=sorted(set(replacements.values()))) if replacements else {}

    kept, seen = [], set()
    replaced = dropped = also_in_count = 0
    for i, result in enumerate(results):
        if i in replacements and replacements[i] in loaded:
            old_id = result.chunk.pk
            result.chunk = loaded[replacements[i]]
            result.components = {**result.components, "near_duplicates": {"replaced_chunk_id": old_id}}
            replaced += 1
        if result.chunk.pk in seen:
            dropped += 1
            continue
        seen.add(result.chunk.pk)
        _annotate(result, dups, freshest, tenant_id, run.where.source_ids)
        also_in_count += bool(result.also_in)
        kept.append(result)
    for rank, result in enumerate(kept, 1):
        result.rank = rank
    summary = {
        "collapse": collapse,
        "clusters": len({dups.cluster_of[v] for v in version_ids if v in dups.cluster_of}),
        "replaced": replaced,
        "dropped": dropped,
        "also_in": also_in_count,
    }
    return kept, summary


def _pair(a: int, b: int) -> tuple[int, int]:
    return (min(a, b), max(a, b))


def _annotate(result, dups, freshest: dict, tenant_id: int, sources: tuple[int, ...]) -> None:
    """Set ``also_in``, ``near_duplicates`` and ``update`` on ``result`` (citations carry them, ``SearchResult.duplicates``)."""
    version_id = result.chunk.version_id
    places = dups.also_in.get(version_id, [])
    if places:
        own = _own_place(result.chunk)
        allowed = [p for p in places if not sources or p.source_id in sources]
        best = max(allowed, key=_fresh_key) if allowed else own
        if _fresh_key(best) > _fresh_key(own):  # show the freshest place of the same content the query may see
            result.chunk = _shown_at(result.chunk, best, tenant_id)
            places = [own, *(p for p in places if p is not best)]
    result.also_in = [p.as_dict() for p in places]
    cid = dups.cluster_of.get(version_id)
    if cid is not None:
        others = sorted(
            (p for p in dups.members[cid] if p.version_id != version_id), key=lambda p: p.freshness, reverse=True
        )
        near = []
        for place in others:
            kind, update, _ = dups.pairs.get(_pair(version_id, place.version_id), ("", "", 0))
            near.append({**place.as_dict(), "kind": kind or None, "update": update or None})
        result.near_duplicates = near
        if freshest[cid].version_id == version_id and others:
            kind, update, _ = dups.pairs.get(_pair(version_id, others[0].version_id), ("", "", 0))
            result.update = update if kind == "meaningful" and update else None


def duplicate_lines(result: dict) -> list[str]:
    """Human-readable lines for a result's or citation's ``also_in``, ``update`` and ``near_duplicates``."""
    lines = []
    if result.get("also_in"):
        lines.append("also in: " + ", ".join(f"{p['source']}/{p['document']}" for p in result["also_in"]))
    if result.get("update"):
        lines.append(f"update: {result['update']}")
    if result.get("near_duplicates"):
        lines.append(
            "near-duplicates: "
            + ", ".join(f"{p['source']}/{p['document']} ({p['kind'] or 'near'})" for p in result["near_duplicates"])
        )
    return lines
