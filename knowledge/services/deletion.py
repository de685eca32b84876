"""Deleting documents without leaving their exact duplicates unindexed, and marking documents
deleted at their source (kept for ``as_of`` searches)."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime

from django.db import transaction
from django.utils import timezone

from core.audit import audit_record
from core.errors import NotFound
from core.models import Tenant
from knowledge.models import Chunk, Document, DocumentVersion, IngestionJob
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

    ``documents_mark_deleted`` for one document (what it does is said there).
    """
    return bool(documents_mark_deleted(document_ids=[document_id], when=when))


def documents_mark_deleted(*, document_ids: Iterable[int], when: datetime | None = None) -> list[int]:
    """Mark documents gone at their source (a sync no longer finds them), in a few statements
    whatever their number. Returns the ids marked (those not already deleted), sorted.

    In one transaction: their current versions and those versions' chunks stop being current (so
    they leave current results, counts and BM25 statistics: the chunk table's statement-level
    triggers count the whole update), ``deleted_at`` is set to ``when`` (default now), and
    documents that were exact duplicates of one of them get a copy of its chunks (one version at a
    time, as ``version_chunks_pass_on`` does; rare). Their versions and access rules stay: an
    ``as_of`` search for a day before ``when`` still finds them, and when a document comes back,
    the next ingestion gives it a new current version.
    """
    ids = sorted(set(document_ids))
    if not ids:
        return []
    with transaction.atomic():
        titles = dict(
            Document.objects.select_for_update()
            .filter(pk__in=ids, deleted_at__isnull=True)
            .order_by("pk")
            .values_list("pk", "title")
        )
        if not titles:
            return []
        current = DocumentVersion.objects.filter(document_id__in=list(titles), is_current=True)
        versions = dict(current.values_list("pk", "document_id"))
        _heirs_pass_on(versions, titles)
        DocumentVersion.objects.filter(pk__in=list(versions)).update(is_current=False)
        Chunk.objects.filter(version_id__in=list(versions), is_current=True).update(is_current=False)
        now = timezone.now()
        Document.objects.filter(pk__in=list(titles)).update(deleted_at=when or now, updated_at=now)
    return sorted(titles)


def _heirs_pass_on(versions: dict[int, int], titles: dict[int, str]) -> None:
    """Give the chunks of each of ``versions`` (``{version id: document id}``, about to stop being
    current) that current versions duplicate to those duplicates (``version_chunks_pass_on``),
    then make it not current at once, so a later one never picks it as the heir. Repeated until
    none is duplicated: an heir re-pointed to one of ``versions`` is served too."""
    while True:
        wanted = set(
            DocumentVersion.objects.filter(is_current=True, duplicate_of_id__in=list(versions)).values_list(
                "duplicate_of_id", flat=True
            )
        )
        if not wanted:
            return
        for version in DocumentVersion.objects.filter(pk__in=sorted(wanted), is_current=True).order_by("pk"):
            version_chunks_pass_on(version, titles[versions[version.pk]])
            version.is_current = False
            version.save(update_fields=["is_current"])
            version.chunks.update(is_current=False)
