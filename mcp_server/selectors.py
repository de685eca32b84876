"""Reads the MCP tools need beyond the REST API's: a document's or a chunk's text with its
versions, and a source with its documents.

Each is built from ``knowledge``'s own scoping: the tenant's rows (``for_tenant``) seen through the
reader's access scope (``knowledge.access``), so a hidden document or source reads exactly as one
that does not exist (``NotFound``), as in the REST API.
"""

from __future__ import annotations

from dataclasses import dataclass

from django.db.models import Count, QuerySet

from core.errors import NotFound
from core.models import Tenant
from knowledge.access import access_scope_get, documents_visible
from knowledge.models import Chunk, Document, DocumentVersion, Source
from knowledge.selectors import document_list, source_overview


@dataclass(frozen=True)
class DocumentText:
    """A visible document, the version asked for (its text loaded) and every version of it,
    newest first, without their text (each with ``chunk_count``)."""

    document: Document
    version: DocumentVersion
    versions: list[DocumentVersion]


def _versions(*, tenant: Tenant, document_id: int) -> list[DocumentVersion]:
    return list(
        DocumentVersion.objects.for_tenant(tenant)
        .filter(document_id=document_id)
        .annotate(chunk_count=Count("chunks"))
        .defer("text")
        .order_by("-number")
    )


def document_text_get(*, tenant: Tenant, document_id: int, user, version: int | None = None) -> DocumentText:
    """Document ``document_id`` of ``tenant`` as ``user`` may see it, with version ``version``
    (a number; ``None``: the current one, else the newest) and its text.

    ``NotFound`` for a document that is not the tenant's, is hidden from ``user``, or has no such
    version; ``PermissionDenied`` when ``user`` is not a member of ``tenant``.
    """
    scope = access_scope_get(tenant=tenant, user=user)
    document = (
        documents_visible(Document.objects.for_tenant(tenant), scope)
        .select_related("source")
        .filter(pk=document_id)
        .first()
    )
    if document is None:
        raise NotFound(f"Document {document_id} not found.")
    versions = _versions(tenant=tenant, document_id=document.pk)
    if version is None:
        chosen = next((v for v in versions if v.is_current), versions[0] if versions else None)
    else:
        chosen = next((v for v in versions if v.number == version), None)
    if chosen is None:
        numbers = ", ".join(str(v.number) for v in versions) or "none"
        raise NotFound(f"Document {document_id} has no version {version} (its versions: {numbers}).")
    chosen.text = DocumentVersion.objects.for_tenant(tenant).values_list("text", flat=True).get(pk=chosen.pk)
    return DocumentText(document=document, version=chosen, versions=versions)


def chunk_get(*, tenant: Tenant, chunk_id: int, user) -> Chunk:
    """Chunk ``chunk_id`` of ``tenant`` with its version, document and source, if ``user`` may
    see its document; ``NotFound`` otherwise (the same words for a hidden one),
    ``PermissionDenied`` when ``user`` is not a member of ``tenant``."""
    scope = access_scope_get(tenant=tenant, user=user)
    chunk = (
        documents_visible(Chunk.objects.for_tenant(tenant), scope, path="version__document__")
        .select_related("version__document__source")
        .defer("embedding", "term_freqs", "version__text")
        .filter(pk=chunk_id)
        .first()
    )
    if chunk is None:
        raise NotFound(f"Chunk {chunk_id} not found.")
    return chunk


def chunk_document_versions(*, tenant: Tenant, chunk: Chunk) -> list[DocumentVersion]:
    """Every version of ``chunk``'s document, newest first, without text (with ``chunk_count``)."""
    return _versions(tenant=tenant, document_id=chunk.version.document_id)


def source_with_documents(
    *, tenant: Tenant, source_id: int, user, limit: int = 200
) -> tuple[Source, QuerySet[Document]]:
    """Source ``source_id`` of ``tenant`` as ``knowledge.selectors.source_overview`` annotates it
    (counts over what ``user`` may see), and its live documents ``user`` may see, newest first,
    at most ``limit``. ``NotFound`` for a source that is not the tenant's or is hidden from
    ``user``."""
    source = source_overview(tenant=tenant, user=user).filter(pk=source_id).first()
    if source is None:
        raise NotFound(f"Source {source_id} not found.")
    documents = document_list(tenant=tenant, user=user).filter(source_id=source.pk)[:limit]
    return source, documents
