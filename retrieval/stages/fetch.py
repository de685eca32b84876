"""Fetch: the top-k chunks of a ranking loaded with their version, document and source (one query).

``chunks_load`` loads chunks by id, scoped to a tenant; ``results_fetch`` turns a fused ranking
into ``SearchResult`` rows. The fuse stage and the signal rerankers (``near_duplicates``) read
through it.
"""

from __future__ import annotations

from django.db.models.base import ModelState

from core.replicas import read_connection
from knowledge.models import Chunk, Document, DocumentVersion, Source
from retrieval.types import CandidateLists, Ranking, SearchResult

# The result rows, narrow: only the columns results, packing and citations read (never the
# chunk's embedding or BM25 columns, nor the version's full text). Each join is a LATERAL
# subquery kept from being flattened (OFFSET 0), so PostgreSQL looks up each result's version and
# document by primary key instead of hashing every tenant's versions (the plain join's plan once
# k reaches a few dozen): the cost follows k, not the size of the tables.
_WANTED = {
    Chunk: {
        *("id", "tenant_id", "version_id", "ordinal", "heading", "text", "token_count", "char_start", "char_end"),
        *("kind", "metadata"),  # metadata: a paged document's page and page_end (knowledge.pages)
    },
    DocumentVersion: {"id", "document_id", "number", "published_at", "ingested_at", "is_current"},
    Document: {"id", "tenant_id", "source_id", "external_id", "uri", "title"},
    Source: {"id", "tenant_id", "name", "kind", "reliability", "half_life_days"},
}
# In each model's field order, as ``Model.from_db`` expects them.
_RESULT_COLUMNS = {
    model: tuple(f.attname for f in model._meta.concrete_fields if f.attname in wanted)
    for model, wanted in _WANTED.items()
}
_RESULTS = """SELECT {chunk}, {version}, {document}, {source}
FROM knowledge_chunk c
CROSS JOIN LATERAL (
    SELECT {version} FROM knowledge_documentversion v WHERE v.id = c.version_id OFFSET 0
) v
CROSS JOIN LATERAL (
    SELECT {document} FROM knowledge_document d
    WHERE d.id = v.document_id AND d.tenant_id = %(tenant)s OFFSET 0
) d
JOIN knowledge_source s ON s.id = d.source_id AND s.tenant_id = %(tenant)s
WHERE c.tenant_id = %(tenant)s AND c.id = ANY(%(ids)s::bigint[])""".format(
    **{
        name: ", ".join(f"{alias}.{column}" for column in _RESULT_COLUMNS[model])
        for name, alias, model in (
            ("chunk", "c", Chunk),
            ("version", "v", DocumentVersion),
            ("document", "d", Document),
            ("source", "s", Source),
        )
    }
)


_VERSION = Chunk._meta.get_field("version")
_DOCUMENT = DocumentVersion._meta.get_field("document")
_SOURCE = Document._meta.get_field("source")
_METADATA = Chunk._meta.get_field("metadata")  # read as JSON text by the raw query: decoded as the ORM does


def _loaded(model, db: str, values):
    """A ``model`` instance read from ``db`` holding ``values`` for ``_RESULT_COLUMNS[model]``.

    What ``Model.from_db`` builds, without running ``__init__`` per row (a third of a 100-row
    fetch's time; these models have no ``pre_init``/``post_init`` receivers): the other fields
    are deferred, so reading one loads it from the database like after ``QuerySet.only``.
    """
    instance = model.__new__(model)
    instance.__dict__.update(zip(_RESULT_COLUMNS[model], values, strict=True))
    instance._state = ModelState()
    instance._state.adding = False
    instance._state.db = db
    return instance


def chunks_load(*, tenant, chunk_ids: list[int]) -> dict[int, Chunk]:
    """The ``tenant``'s chunks among ``chunk_ids`` with version, document and source loaded: one query.

    Returns ``{chunk id: Chunk}`` (ids of other tenants' or deleted chunks are absent). Only the
    columns in ``_RESULT_COLUMNS`` are loaded; the others (the chunk's embedding, the version's
    text, ...) are deferred like ``QuerySet.only`` defers them: reading one costs a query.
    """
    if not chunk_ids:
        return {}
    tenant_id = tenant if isinstance(tenant, int) else tenant.pk
    connection = read_connection()  # a replica in a marked read path (core.replicas)
    with connection.cursor() as cursor:
        cursor.execute(_RESULTS, {"tenant": tenant_id, "ids": list(chunk_ids)})
        rows = cursor.fetchall()
    db = connection.alias
    widths = [len(columns) for columns in _RESULT_COLUMNS.values()]
    sources: dict[int, Source] = {}
    documents: dict[int, Document] = {}
    versions: dict[int, DocumentVersion] = {}
    chunks: dict[int, Chunk] = {}
    for row in rows:
        parts, start = [], 0
        for width in widths:
            parts.append(row[start : start + width])
            start += width
        chunk_row, version_row, document_row, source_row = parts
        source = sources.get(source_row[0])
        if source is None:
            source = sources[source_row[0]] = _loaded(Source, db, source_row)
        document = documents.get(document_row[0])
        if document is None:
            document = documents[document_row[0]] = _loaded(Document, db, document_row)
            _SOURCE.set_cached_value(document, source)
        version = versions.get(version_row[0])
        if version is None:
            version = versions[version_row[0]] = _loaded(DocumentVersion, db, version_row)
            _DOCUMENT.set_cached_value(version, document)
        chunk = _loaded(Chunk, db, chunk_row)
        chunk.metadata = _METADATA.from_db_value(chunk.metadata, None, connection)
        _VERSION.set_cached_value(chunk, version)
        chunks[chunk.pk] = chunk
    return chunks


def results_fetch(*, tenant, ranking: Ranking, candidates: CandidateLists, k: int) -> list[SearchResult]:
    """The top ``k`` of ``ranking`` as ``SearchResult`` rows (chunk, version, document, source loaded).

    One narrow query (``chunks_load``), scoped to ``tenant``; each result carries every
    retriever's rank and score for its chunk (``components``).
    """
    top = ranking[:k]
    chunks = chunks_load(tenant=tenant, chunk_ids=[item for item, _ in top])
    positions = {
        name: {item: (rank, score) for rank, (item, score) in enumerate(ranked, 1)}
        for name, ranked in candidates.lists.items()
    }
    results: list[SearchResult] = []
    for item, score in top:
        if item not in chunks:
            continue
        components = {
            name: {
                "rank": found[item][0],
                "score": round(found[item][1], 6),
                **candidates.details.get(name, {}).get(item, {}),
            }
            for name, found in positions.items()
            if item in found
        }
        results.append(SearchResult(chunk=chunks[item], score=score, rank=len(results) + 1, components=components))
    return results
