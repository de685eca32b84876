"""Deleting documents without leaving their exact duplicates unindexed."""

from __future__ import annotations

from core.errors import NotFound
from core.models import Tenant
from knowledge.models import Document, DocumentVersion
from knowledge.services.ingestion import version_reindex


def document_delete(*, tenant: Tenant, document_id: int) -> None:
    """Delete a tenant's document with its versions and chunks.

    Documents that were recorded as exact duplicates of it are indexed on their own (they
    would otherwise have no chunks). ``NotFound`` if the document is not the tenant's.
    """
    document = Document.objects.for_tenant(tenant).filter(pk=document_id).first()
    if document is None:
        raise NotFound(f"Document {document_id} not found.")
    orphans = list(
        DocumentVersion.objects.for_tenant(tenant)
        .filter(is_current=True, duplicate_of__document=document)
        .select_related("document", "document__source")
    )
    document.delete()
    for version in orphans:
        version_reindex(version_id=version.pk)
