"""Reads of tenant data. Each takes the tenant explicitly and scopes through ``for_tenant``."""

from __future__ import annotations

from django.db.models import Count, Prefetch, QuerySet

from knowledge.errors import NotFound, PermissionDenied
from knowledge.models import Document, DocumentVersion, Membership, Tenant


def membership_for_user(user) -> Membership:
    """The signed-in user's membership; ``PermissionDenied`` if the user has no tenant."""
    membership = Membership.objects.select_related("tenant").filter(user_id=getattr(user, "pk", None)).first()
    if membership is None:
        raise PermissionDenied("Your account does not belong to any tenant.")
    return membership


def tenant_for_user(user) -> Tenant:
    """The tenant the user belongs to; ``PermissionDenied`` if none."""
    return membership_for_user(user).tenant


def document_list(*, tenant: Tenant, source_name: str | None = None) -> QuerySet[Document]:
    """The tenant's documents, newest first, with their source and chunk count of the current version."""
    documents = Document.objects.for_tenant(tenant).select_related("source").order_by("-updated_at", "-id")
    if source_name:
        documents = documents.filter(source__name=source_name)
    return documents


def document_get(*, tenant: Tenant, document_id: int) -> Document:
    """One of the tenant's documents with its versions (newest first); ``NotFound`` otherwise."""
    versions = DocumentVersion.objects.annotate(chunk_count=Count("chunks")).order_by("-number")
    document = (
        Document.objects.for_tenant(tenant)
        .select_related("source")
        .prefetch_related(Prefetch("versions", queryset=versions))
        .filter(pk=document_id)
        .first()
    )
    if document is None:
        raise NotFound(f"Document {document_id} not found.")
    return document
