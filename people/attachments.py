"""Files a member attaches to one of their conversations, to ask about them there.

A member (not a viewer: viewers keep no conversations) attaches a file to their conversation, or
to a new one named after the file: the REST API (``people.attachment_apis``), the portal's ask
page and the MCP tool ``attach_file`` all call ``conversation_file_attach``. The file is read and
stored by ``knowledge.attachments.attachment_ingest`` (parsed in the sandbox, counted in the
tenant's quotas, private to the member) and linked to the conversation here
(``ConversationFile``) in the same transaction, so a refused file leaves nothing behind.

Asking in that conversation (``people.conversations.conversation_ask``) searches the tenant's
documents plus its files (``conversation_document_ids``); every other question, the member's own
outside that conversation included, never sees them. Removing a file, or deleting the
conversation (``conversation_files_delete``), deletes the files' documents, versions and chunks.
When the member leaves the tenant their conversations stay, and so do their files, still private
(a member who comes back finds both); when the account is deleted, its files are deleted with the
next file attached in the tenant (``knowledge.attachments.attachments_orphans_delete``).
"""

from __future__ import annotations

from django.db import transaction
from django.db.models import QuerySet

from core.errors import InvalidInput, NotFound, PermissionDenied
from core.memberships import membership_get
from knowledge.attachments import attachment_ingest, attachment_name, attachments_delete, attachments_orphans_delete
from people.models import Conversation, ConversationFile
from people.selectors import conversation_get

# Files in one conversation: enough to compare a handful of documents; the quotas bound the rest.
MAX_FILES_PER_CONVERSATION = 20


def _room_check(conversation: Conversation) -> None:
    if conversation.files.count() >= MAX_FILES_PER_CONVERSATION:
        raise InvalidInput(
            f"A conversation holds at most {MAX_FILES_PER_CONVERSATION} files; remove one or start a new conversation.",
            code="too_many_files",
        )


def conversation_file_attach(
    *, tenant, user, file_name: str, data: bytes, conversation_id: int | None = None
) -> ConversationFile:
    """Attach the file ``file_name`` (its bytes ``data``) to ``user``'s conversation
    ``conversation_id``, or to a new conversation titled after the file; returns the
    ``ConversationFile`` (its ``conversation`` and ``document`` loaded).

    The file is checked, parsed in the sandbox and stored as a document private to ``user``
    (``knowledge.attachments.attachment_ingest``), then linked in the same transaction.

    Errors, each before anything is stored: ``PermissionDenied`` for an anonymous user or a viewer;
    ``NotFound`` for a conversation that is not the user's in this tenant; ``InvalidInput``
    (``too_many_files``) past ``MAX_FILES_PER_CONVERSATION``, and for an empty, damaged or
    unreadable file; ``UnsupportedFileType`` (415), ``PayloadTooLarge`` (413) and
    ``QuotaExceeded`` (403) as ``attachment_ingest`` raises them.
    """
    if user is None or not user.is_authenticated:
        raise PermissionDenied("Attaching a file needs a signed-in user.")
    if not membership_get(user=user, tenant=tenant).can_participate:
        raise PermissionDenied("Viewers do not keep conversations; ask a tenant admin for the member role.")
    if conversation_id is not None:
        _room_check(conversation_get(tenant=tenant, user=user, conversation_id=conversation_id))
    name = attachment_name(file_name)
    links: list[ConversationFile] = []

    def link(document) -> None:
        if conversation_id is None:
            conversation = Conversation.objects.create(tenant=tenant, user=user, title=name[:200])
        else:
            # The row lock orders concurrent attachments to one conversation (and its questions).
            conversation = Conversation.objects.select_for_update().get(pk=conversation_id)
            _room_check(conversation)
            conversation.save(update_fields=["updated_at"])
        links.append(
            ConversationFile.objects.create(
                tenant=tenant, conversation=conversation, document=document, name=name, size=len(data)
            )
        )

    attachments_orphans_delete(tenant=tenant)
    attachment_ingest(tenant=tenant, user=user, file_name=name, data=data, on_stored=link)
    return links[-1]


def conversation_file_list(*, tenant, user, conversation_id: int) -> QuerySet[ConversationFile]:
    """The files attached to ``user``'s conversation ``conversation_id``, oldest first, with their
    documents. ``NotFound`` for a conversation that is not the user's in this tenant."""
    conversation = conversation_get(tenant=tenant, user=user, conversation_id=conversation_id)
    return ConversationFile.objects.for_conversation(tenant, conversation.pk).select_related("document")


def conversation_document_ids(*, tenant, conversation_id: int) -> list[int]:
    """Ids of the documents of the files attached to conversation ``conversation_id`` of
    ``tenant`` (whose ownership the caller has checked): what a question asked in it searches
    besides the tenant's documents."""
    files = ConversationFile.objects.for_conversation(tenant, conversation_id)
    return list(files.values_list("document_id", flat=True))


def conversation_file_remove(*, tenant, user, conversation_id: int, file_id: int) -> None:
    """Remove file ``file_id`` from ``user``'s conversation ``conversation_id``: its document,
    versions and chunks are deleted. ``NotFound`` for a conversation that is not the user's, or a
    file that is not in it (the same error: an id reveals nothing)."""
    conversation = conversation_get(tenant=tenant, user=user, conversation_id=conversation_id)
    attached = ConversationFile.objects.for_conversation(tenant, conversation.pk).filter(pk=file_id).first()
    if attached is None:
        raise NotFound(f"File {file_id} is not attached to conversation {conversation_id}.")
    with transaction.atomic():
        attachments_delete(tenant=tenant, document_ids=[attached.document_id])  # the link goes with it


def conversation_files_delete(*, tenant, conversation: Conversation) -> None:
    """Delete the documents of every file attached to ``conversation`` (of ``tenant``), with their
    versions and chunks; call it inside the transaction that deletes the conversation."""
    attachments_delete(
        tenant=tenant, document_ids=conversation_document_ids(tenant=tenant, conversation_id=conversation.pk)
    )
