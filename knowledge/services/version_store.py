"""Storing one prepared document as a version with its chunks, and rebuilding a version's chunks.

``documents_ingest`` (``knowledge.services.ingestion``) prepares documents (hash, spans,
embeddings) and calls ``prepared_store`` for each inside its one transaction: an unchanged text
stays, a duplicate gets a version without chunks, anything else a new current version whose
chunks replace the old version's in current results (``docs/versions.md``).
"""

from __future__ import annotations

import hashlib
import logging
from dataclasses import dataclass, field

import numpy as np
from django.db import DataError, IntegrityError, transaction
from django.db.models import Max

from core.errors import InvalidInput
from core.models import Tenant
from knowledge.dedup.selectors import tenant_duplicates_changed
from knowledge.embedders import get_embedder
from knowledge.ingestion.documents import ReadDocument
from knowledge.ingestion.splitters import Span, Splitter, get_splitter
from knowledge.models import Chunk, Document, DocumentVersion, Source
from knowledge.pages import chunk_page_metadata, document_metadata, page_starts_of
from knowledge.services.embeddings import embedding_input
from knowledge.services.ingest_reports import IngestOutcome
from knowledge.services.originals import original_keep, original_size
from knowledge.summaries.services import summaries_enqueue
from knowledge.vector_index import vector_index_ensure

logger = logging.getLogger(__name__)


def content_hash(text: str) -> str:
    """SHA-256 hex digest of normalized text (UTF-8)."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


@dataclass
class Prepared:
    """One document of an ingestion call, before it is stored: its content hash, its spans and their
    vectors (``vectors`` None until embedded, or for good when embedding is deferred), and its
    ``status``: ``pending``, then ``unchanged``, ``duplicate`` or ``new``."""

    read: ReadDocument
    hash: str
    spans: list[Span] = field(default_factory=list)
    vectors: np.ndarray | None = None
    status: str = "pending"  # unchanged | duplicate | new


def prepared_store(**kwargs) -> IngestOutcome:
    """``_store``, with the database refusing a document turned into ``InvalidInput`` naming it.

    The database's message (which may quote SQL) is logged, never shown.
    """
    external_id = kwargs["item"].read.external_id
    try:
        return _store(**kwargs)
    except (DataError, IntegrityError) as exc:
        logger.warning("The database refused document %r: %s", external_id, exc)
        reason = "a value is too long or malformed" if isinstance(exc, DataError) else "it conflicts with stored data"
        raise InvalidInput(
            f"{external_id}: the document could not be stored ({reason}).", code="document_not_stored"
        ) from exc


def current_version_id(document_id: int) -> int:
    """The id of the current version of document ``document_id`` (``DoesNotExist`` when it has none)."""
    return DocumentVersion.objects.filter(document_id=document_id, is_current=True).values_list("id", flat=True).get()


def chunks_create(
    version: DocumentVersion,
    spans: list[Span],
    vectors: np.ndarray | None,
    embedder_key: str,
    page_starts: list[int] | None = None,
) -> list[Chunk]:
    """Insert the chunks of ``version`` (call inside the version's transaction); ``vectors``
    ``None`` stores them without embeddings (``KB_EMBED_QUEUE``). With ``page_starts`` (a paged
    document's, ``knowledge.pages``) each chunk's metadata holds its ``page`` and ``page_end``."""
    return Chunk.objects.bulk_create(
        (
            Chunk(
                tenant_id=version.document.tenant_id,
                version=version,
                ordinal=i,
                heading=span.heading,
                text=span.text,
                token_count=span.token_count,
                char_start=span.start,
                char_end=span.end,
                embedder=embedder_key,
                embedding=None if vectors is None else vectors[i],  # None: for the embedding task
                is_current=version.is_current,
                metadata=chunk_page_metadata(page_starts, span.start, span.end),
            )
            for i, span in enumerate(spans)
        ),
        batch_size=500,
    )


def _store(
    *,
    tenant: Tenant,
    source: Source,
    item: Prepared,
    embedder_key: str,
    duplicate_version_id: int | None,
) -> IngestOutcome:
    """Store one prepared document (see module docstring) inside the caller's transaction.

    No savepoint per document: a failure aborts the whole call, and thousands of savepoints in
    one transaction would overflow PostgreSQL's subtransaction cache.
    """
    read = item.read
    with transaction.atomic(savepoint=False):
        document, _ = Document.objects.select_for_update().get_or_create(
            tenant=tenant,
            external_id=read.external_id,
            defaults={
                "source": source,
                "title": read.title,
                "uri": read.uri,
                "metadata": document_metadata(read.metadata),
            },
        )
        current = document.versions.filter(is_current=True).first()
        if current is not None and current.content_hash == item.hash:
            return IngestOutcome(
                read.external_id,
                "unchanged",
                document.pk,
                current.number,
                current.chunks.filter(kind=Chunk.Kind.BODY).count(),
                current.duplicate_of_id,
            )
        if item.status == "new" and not item.spans:
            raise InvalidInput(f"{read.external_id}: no text to index.", code="empty_file")
        previous_title = document.title
        document.source = source
        document.title, document.uri, document.metadata = (
            read.title,
            read.uri,
            document_metadata(read.metadata),  # the line boxes go beside the original (knowledge.originals)
        )
        document.deleted_at = None  # back at its source after a sync marked it deleted
        document.save(update_fields=["source", "title", "uri", "metadata", "deleted_at", "updated_at"])
        if current is not None:
            number = current.number + 1
        else:
            number = (document.versions.aggregate(last=Max("number"))["last"] or 0) + 1
        if current is not None:
            version_chunks_pass_on(current, previous_title)
            current.is_current = False
            current.save(update_fields=["is_current"])
            current.chunks.update(is_current=False)  # kept for as_of search (docs/versions.md)
        version = DocumentVersion.objects.create(
            tenant_id=document.tenant_id,
            document=document,
            number=number,
            text=read.text,
            content_hash=item.hash,
            published_at=read.published_at,
            is_current=True,
            duplicate_of_id=duplicate_version_id,
            original_bytes=original_size(read),
        )
        original_keep(version=version, read=read)  # a PDF's file, an office file's pictures: once this commits
        chunks = []
        if duplicate_version_id is None:
            page_starts = page_starts_of(read.metadata, len(read.text))
            chunks = chunks_create(version, item.spans, item.vectors, embedder_key, page_starts)
    if duplicate_version_id is not None:
        status = "duplicate"
        tenant_duplicates_changed(tenant=document.tenant_id)
    else:
        status = "updated" if current is not None else "created"
    return IngestOutcome(read.external_id, status, document.pk, number, len(chunks), duplicate_version_id)


def version_chunks_pass_on(version: DocumentVersion, title: str) -> None:
    """Before ``version`` stops being current: give a copy of its chunks to the documents that duplicate it.

    Its chunks (text, offsets, embeddings) are exactly their content's, so they are copied to the
    first duplicate, their heading's title becoming that document's title (the embeddings keep
    the old title, which passage-sized chunks were embedded with); the other duplicates are
    re-pointed at that one. ``version`` keeps its own chunks (they become not current with it,
    for ``as_of`` search). Call inside the transaction that replaces ``version``.
    """
    heirs = list(
        DocumentVersion.objects.select_for_update(of=("self",))
        .filter(is_current=True, duplicate_of=version)
        .select_related("document")
        .order_by("pk")
    )
    if not heirs:
        return
    heir, others = heirs[0], heirs[1:]
    new_title = heir.document.title
    copies = []
    for chunk in version.chunks.order_by("ordinal"):
        chunk.pk = None
        chunk._state.adding = True
        chunk.version = heir
        chunk.is_current = True
        if chunk.heading == title:
            chunk.heading = new_title
        elif chunk.heading.startswith(f"{title} › "):
            chunk.heading = (new_title + chunk.heading[len(title) :])[:500]
        copies.append(chunk)
    Chunk.objects.bulk_create(copies, batch_size=500)
    heir.duplicate_of = None
    heir.save(update_fields=["duplicate_of"])
    DocumentVersion.objects.filter(pk__in=[other.pk for other in others]).update(duplicate_of=heir)


def version_reindex(*, version_id: int, splitter: Splitter | None = None) -> int:
    """Rebuild the chunks of a current version from its stored text. Returns the chunk count.

    Its summary chunk goes with the old chunks; a new one is queued (``summaries_enqueue``).
    """
    version = DocumentVersion.objects.select_related("document", "document__tenant").get(pk=version_id)
    document = version.document
    tenant = document.tenant
    read = ReadDocument(
        external_id=document.external_id,
        title=document.title,
        text=version.text,
        uri=document.uri,
        metadata=document.metadata if version.is_current else {},  # the row describes its current version
    )
    spans = (splitter or get_splitter()).split(read)
    embedder = get_embedder(tenant.embedder)
    vectors = embedder.embed([embedding_input(s) for s in spans])
    vector_index_ensure(embedder_key=embedder.key, dimensions=embedder.dimensions)
    with transaction.atomic():
        version = DocumentVersion.objects.select_for_update().get(pk=version_id)
        version.chunks.all().delete()
        version.duplicate_of = None
        version.save(update_fields=["duplicate_of"])
        chunks_create(version, spans, vectors, embedder.key, page_starts_of(read.metadata, len(read.text)))
    summaries_enqueue(tenant=tenant)  # the version's summary went with its chunks
    return len(spans)
