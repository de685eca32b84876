"""The MCP tool ``attach_file``: a file of the member's own, attached to their conversation.

The content comes in the call, base64-encoded (no URLs: the server fetches nothing for a tool).
It goes through ``people.attachments.conversation_file_attach``, as the REST API's and the
portal's attachments do: parsed in the sandbox, counted in the tenant's quotas, private to the
member and searched only when they ``ask`` in that conversation.
"""

from __future__ import annotations

import base64
import binascii

from pydantic import BaseModel, ConfigDict, Field

from core.errors import InvalidInput
from core.models import Membership
from people.attachments import conversation_file_attach

MAX_ID = 2**63 - 1  # the largest database id (bigint)
# Base64 of the largest file any setting would take (4 characters per 3 bytes of 1 GiB); the
# service refuses a decoded file over KB_MAX_UPLOAD_BYTES.
MAX_BASE64_CHARS = 4 * (2**30 // 3 + 1)


class AttachFileArguments(BaseModel):
    """Arguments of ``attach_file``: unknown names are refused, not ignored."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(
        min_length=1,
        max_length=255,
        description="The file's name with its extension (e.g. budget.pdf, notes.md): the extension picks the reader.",
    )
    content_base64: str = Field(
        min_length=1, max_length=MAX_BASE64_CHARS, description="The file's bytes, base64-encoded."
    )
    conversation: int | None = Field(
        None,
        ge=1,
        le=MAX_ID,
        description="Attach to this conversation (a conversation_id from ask or attach_file); default: a new one.",
    )


def attach_file_run(*, membership: Membership, arguments: AttachFileArguments) -> dict:
    """``{"conversation_id", "file": {"id", "name", "size", "document_id", "pages"}, "hint"}``:
    the attached file and the conversation to ask in. ``InvalidInput`` (``invalid_base64``) for
    content that is not base64, and the errors of ``conversation_file_attach`` (a bad file,
    a viewer, another member's conversation, a quota), nothing stored."""
    try:
        data = base64.b64decode(arguments.content_base64, validate=True)
    except (binascii.Error, ValueError) as exc:
        raise InvalidInput("content_base64 is not valid base64.", code="invalid_base64") from exc
    attached = conversation_file_attach(
        tenant=membership.tenant,
        user=membership.user,
        file_name=arguments.name,
        data=data,
        conversation_id=arguments.conversation,
    )
    pages = (attached.document.metadata or {}).get("pages")
    return {
        "conversation_id": attached.conversation_id,
        "file": {
            "id": attached.pk,
            "name": attached.name,
            "size": attached.size,
            "document_id": attached.document_id,
            "pages": pages if isinstance(pages, int) else None,
        },
        "hint": f"Ask with conversation={attached.conversation_id} to search this file.",
    }
