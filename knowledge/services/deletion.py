"""Deleting documents without leaving their exact duplicates unindexed, and marking documents
deleted at their source (kept for ``as_of`` searches)."""

from __future__ import annotations

from datetime import datetime

from django.db import transaction
from django.utils import timezone

from core.audit import audit_record
from core.errors import NotFound
from core.models import Tenant
from knowledge.models import Document, DocumentVersion, IngestionJob
from knowledge.services.ingestion import version_chunks_pass_on, version_reindex
from knowledge.services.originals import document_originals_remove
from knowledge.services.uploads import upload_files_remove


def document_delete(*, tenant: Tenant, document_id: int) -> None:
    """Delete a tenant's document with its versions and chunks.

    Documents that were recorded as exact duplicates of it are indexed on their own (they
    would otherwise have no chunks). Recorded in the audit log (``document.deleted``). An
    uploaded file it was read from, if still stored, and its versions' kept original files
    (``knowledge.originals``) are removed once the deletion commits.
    ``NotFound`` if the document is not the tenant's.
    """
    document = Document.objects.for_tenant(tenant).filter(pk=document_id).first()
    if document is None:
        raise NotFound(f"Document {document_id} not found.")
    orphans = list(
        DocumentVersion.objects.for_tenant(tenant)
        .filter(is_current=True, duplicate_of__document=document)
        .select_related("document", "document__source")
    )
    details = {"external_id": document.external_id, "title": document.title, "source": document.source_id}
    document.delete()
    document_originals_remove(tenant_id=tenant.pk, document_ids=[document_id])
    upload_files_remove(  # an uploaded file the document was read from, if still stored
        jobs=IngestionJob.objects.for_tenant(tenant).filter(
            source_id=document.source_id, result__documents__contains=[{"document_id": document_id}]
        )
    )
    audit_record(action="document.deleted", tenant=tenant, obj=document, object_id=str(document_id), changes=details)
    for version in orphans:
        version_reindex(version_id=version.pk)


def document_mark_deleted(*, document_id: int, when: datetime | None = None) -> bool:
    """Mark a document gone at its source (a sync no longer finds it). Returns False if it already was.

    In one transaction: its current version and that version's chunks stop being current (so
    it leaves current results, counts and BM25 statistics), ``deleted_at`` is set to ``when``
    (default now), and documents that were exact duplicates of it get a copy of its chunks.
    Its versions stay: an ``as_of`` search for a day before ``when`` still finds it, and when
    the document comes back, the next ingestion gives it a new current version.
    """
    with transaction.atomic():
        document = Document.objects.select_for_update().filter(pk=document_id).first()
        if document is None or document.deleted_at is not None:
            return False
        current = document.versions.filter(is_current=True).first()
        if current is not None:
            version_chunks_pass_on(current, document.title)
            current.is_current = False
            current.save(update_fields=["is_current"])
            current.chunks.update(is_current=False)
        document.deleted_at = when or timezone.now()
        document.save(update_fields=["deleted_at", "updated_at"])
    return True
