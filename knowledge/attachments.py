"""Files members attach to their conversations, as the knowledge base keeps them.

A file attached to a conversation (``people.attachments`` links it to the conversation) is read
like an upload: the cheap checks of ``read_check`` first, then ``read_bytes``, which parses PDFs,
office files, reST and HTML in the parse sandbox (``knowledge.ingestion.sandbox``). It is stored as
an ordinary document with its version and chunks, so it counts in the tenant's quotas (documents,
stored bytes, chunks: ``knowledge.quotas``) and is cited like any other document. What keeps it
private to its member and to its conversation:

* it lives in the tenant's one source of kind ``conversation`` (made with the tenant's first
  attached file, and counted as one of its sources), which no source list shows
  (``knowledge.access.sources_visible``);
* an access rule grants the document to its member alone, and the document selectors show a
  document of that source only to a user a rule names, owners and admins included
  (``knowledge.access.documents_visible``): a file whose rule is gone is shown to no one;
* retrieval hides the versions of every such document except the files of the conversation that
  asks (``attached_versions_hidden``, applied inside the SQL of both retrievers by
  ``retrieval.filters.RetrievalFilter``), so another member, an admin, and the same member
  outside that conversation never find it;
* exact-duplicate detection never pairs it with another document
  (``knowledge.services.ingestion``): each file keeps its own chunks, and no tenant document
  is ever stored as a copy of a private file.
"""

from __future__ import annotations

import itertools
import uuid
from collections.abc import Callable, Iterable
from pathlib import Path

from django.conf import settings
from django.db import IntegrityError, connection

from core.errors import InvalidInput, PayloadTooLarge, UnsupportedFileType
from core.models import Tenant
from core.uploads import size_text
from knowledge.access import access_rule_grant
from knowledge.ingestion.readers import read_bytes, read_check
from knowledge.models import AccessRule, Document, Source
from knowledge.services import document_delete, documents_ingest

CONVERSATION_SOURCE_NAME = "Conversation files"
MAX_NAME_CHARS = 255

# From the tenant's conversation source (none: nothing more is read) to its documents, through
# document_tenant_source_idx (the OFFSET 0 keeps the lateral subquery a parameterized index scan,
# never a scan of the tenant's documents), and their versions.
_HIDDEN = f"""SELECT ARRAY(
    SELECT hidden.id FROM knowledge_source s CROSS JOIN LATERAL (
        SELECT v.id FROM knowledge_document d JOIN knowledge_documentversion v ON v.document_id = d.id
        WHERE d.tenant_id = s.tenant_id AND d.source_id = s.id AND NOT (d.id = ANY(%(keep)s::bigint[]))
        OFFSET 0) hidden
    WHERE s.tenant_id = %(t)s AND s.kind = '{Source.Kind.CONVERSATION.value}'
    ORDER BY hidden.id)"""


def attached_versions_hidden(*, tenant: Tenant | int, keep: Iterable[int] = ()) -> tuple[int, ...]:
    """Ids of every version of ``tenant``'s attached files except those of the documents ``keep``
    (the files of the conversation asking, none outside a conversation): what a query of the
    tenant must not see. One query (through ``document_tenant_source_idx``); empty when the tenant
    has no attached file."""
    tenant_id = int(getattr(tenant, "pk", tenant))
    with connection.cursor() as cursor:
        cursor.execute(_HIDDEN, {"t": tenant_id, "keep": sorted({int(pk) for pk in keep})})
        (hidden,) = cursor.fetchone()
    return tuple(hidden)


def attachment_name(file_name: str) -> str:
    """The name a file is kept under: its last path part, without NUL characters, at most 255
    characters. ``InvalidInput`` (``file_name_required``) when nothing is left."""
    name = Path((file_name or "").replace("\\", "/")).name.replace("\x00", "").strip()[:MAX_NAME_CHARS]
    if not name:
        raise InvalidInput("The file needs a name with its extension, e.g. report.pdf.", code="file_name_required")
    return name


def attachment_ingest(
    *, tenant: Tenant, user, file_name: str, data: bytes, on_stored: Callable[[Document], None]
) -> Document:
    """Read the file ``file_name`` (its bytes ``data``) and store it as a document private to
    ``user`` in the tenant's conversation source; returns the document.

    Checked and read like an upload (``KB_MAX_UPLOAD_BYTES``, ``read_check``, ``read_bytes``:
    PDFs, office files, reST and HTML in the parse sandbox, under ``KB_PARSE_TIMEOUT_S`` and
    ``KB_PARSE_MEMORY_MB``), then stored by ``documents_ingest`` (embedded, quotas checked) with an
    access rule granting it to ``user`` alone. ``on_stored(document)`` runs inside the storing
    transaction, so what it writes (the link to the conversation) commits with the document or not
    at all.

    Errors, each before anything is stored: ``PayloadTooLarge`` (413) over the upload limit,
    ``UnsupportedFileType`` (415) for a type no reader takes or a JSONL file (its lines name
    documents of their own), ``InvalidInput`` (400) for an empty, damaged, mislabelled or
    encrypted file, one with no text, or a parse past the sandbox's limits, ``QuotaExceeded``
    (403) past the tenant's documents, stored bytes, chunks or (with its first file) sources.
    """
    name = attachment_name(file_name)
    if len(data) > settings.KB_MAX_UPLOAD_BYTES:
        raise PayloadTooLarge(
            f"{name}: the file is larger than {size_text(settings.KB_MAX_UPLOAD_BYTES)} (the limit for one file)."
        )
    if Path(name).suffix.lower() == ".jsonl":
        raise UnsupportedFileType(f"{name}: a JSONL file holds many documents; attach one document at a time.")
    read_check(data, name=name)
    external_id = f"conversation/{uuid.uuid4().hex}/{name}"
    (read,) = read_bytes(data, name=name, external_id=external_id, uri=name)
    read.external_id, read.title = external_id, name
    read.metadata = {**(read.metadata or {}), "attached_by": user.pk, "file_name": name, "bytes": len(data)}
    stored: list[Document] = []

    def grant(report) -> None:
        document = Document.objects.get(pk=report.outcomes[0].document_id)
        access_rule_grant(tenant=tenant, document=document, user=user)
        on_stored(document)
        stored.append(document)

    try:
        documents_ingest(tenant=tenant, source=_conversation_source(tenant), documents=[read], on_stored=grant)
    except IntegrityError:  # another request made the tenant's conversation source meanwhile: use it
        documents_ingest(tenant=tenant, source=_conversation_source(tenant), documents=[read], on_stored=grant)
    return stored[-1]


def _conversation_source(tenant: Tenant) -> Source:
    """The tenant's conversation source, or a new unsaved one (``documents_ingest`` saves it with
    its first document, counting it against the sources quota) named ``CONVERSATION_SOURCE_NAME``,
    or that name numbered when a source of the tenant already has it."""
    sources = Source.objects.for_tenant(tenant)
    source = sources.filter(kind=Source.Kind.CONVERSATION).order_by("pk").first()
    if source is not None:
        return source
    taken = set(sources.filter(name__startswith=CONVERSATION_SOURCE_NAME).values_list("name", flat=True))
    names = itertools.chain(
        [CONVERSATION_SOURCE_NAME], (f"{CONVERSATION_SOURCE_NAME} ({n})" for n in itertools.count(2))
    )
    name = next(candidate for candidate in names if candidate not in taken)
    return Source(tenant=tenant, name=name, kind=Source.Kind.CONVERSATION)


def attachments_delete(*, tenant: Tenant, document_ids: Iterable[int]) -> None:
    """Delete the tenant's attached files ``document_ids`` with their versions, chunks and access
    rules (``knowledge.services.document_delete``, each recorded in the audit log); ids that are
    not the tenant's attached files are skipped. Inside the caller's transaction when it holds one
    (the one that deletes their conversation)."""
    ids = list(
        Document.objects.for_tenant(tenant)
        .filter(pk__in=list(document_ids), source__kind=Source.Kind.CONVERSATION)
        .values_list("pk", flat=True)
    )
    for document_id in ids:
        document_delete(tenant=tenant, document_id=document_id)


def attachments_orphans_delete(*, tenant: Tenant) -> int:
    """Delete the tenant's attached files that no rule grants to a user any more (their member's
    account was deleted, taking the rule with it): no one can see them, yet they count in the
    quotas. Returns how many were deleted. One query when there are none."""
    granted = AccessRule.objects.for_tenant(tenant).filter(user__isnull=False, document__isnull=False)
    orphans = (
        Document.objects.for_tenant(tenant)
        .filter(source__kind=Source.Kind.CONVERSATION)
        .exclude(pk__in=granted.values("document_id"))
        .values_list("pk", flat=True)
    )
    ids = list(orphans)
    attachments_delete(tenant=tenant, document_ids=ids)
    return len(ids)
