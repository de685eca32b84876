"""The MCP tool ``attach_file``: a member's file, searched by ``ask`` in its conversation only."""

import base64

from knowledge.models import Document
from people.models import ConversationFile
from tests.mcp.conftest import call, key_for

NOTES = (
    b"# Zephyr budget notes\n\nThe zephyrzq project budget for next year is forty-two thousand euros, "
    b"split between the kiln repairs and the glaze workshop.\n"
)
QUESTION = "What is the zephyrzq project budget?"


def attach(url, key, data=NOTES, name="zephyr-budget.md", **arguments):
    return call(url, key, "attach_file", name=name, content_base64=base64.b64encode(data).decode(), **arguments)


def cited(result) -> set[int]:
    assert not result.is_error, result
    return {citation["document_id"] for citation in result.structured_content["citations"]}


def test_a_file_attached_over_mcp_is_cited_by_ask_in_its_conversation_and_nowhere_else(mcp_url, acme):
    key = key_for(acme.users["member"], acme.tenant)
    attached = attach(mcp_url, key)
    assert not attached.is_error, attached
    data = attached.structured_content
    document_id, conversation = data["file"]["document_id"], data["conversation_id"]
    assert data["file"]["name"] == "zephyr-budget.md"

    there = call(mcp_url, key, "ask", question=QUESTION, conversation=conversation, extractive=True)
    assert document_id in cited(there)
    assert document_id not in cited(call(mcp_url, key, "ask", question=QUESTION, extractive=True))
    found = call(mcp_url, key, "search", query="zephyrzq budget", mode="lexical").structured_content["results"]
    assert document_id not in {row["document_id"] for row in found}

    for who in ("admin", "owner", "granted"):
        other = key_for(acme.users[who], acme.tenant)
        assert document_id not in cited(call(mcp_url, other, "ask", question=QUESTION, extractive=True))
        fetched = call(mcp_url, other, "fetch", document_id=document_id)
        assert fetched.is_error and fetched.structured_content["error"]["code"] == "not_found"
        refused = attach(mcp_url, other, conversation=conversation)
        assert refused.structured_content["error"]["code"] == "not_found"


def test_a_bad_file_or_bad_base64_is_a_tool_error_and_nothing_is_stored(mcp_url, acme):
    key = key_for(acme.users["member"], acme.tenant)
    before = Document.objects.count()
    broken = attach(mcp_url, key, data=b"not a pdf", name="broken.pdf")
    assert broken.is_error and broken.structured_content["error"]["code"] == "invalid_pdf"
    garbled = call(mcp_url, key, "attach_file", name="notes.md", content_base64="%%% not base64 %%%")
    assert garbled.is_error and garbled.structured_content["error"]["code"] == "invalid_base64"
    viewer = attach(mcp_url, key_for(acme.users["viewer"], acme.tenant))
    assert viewer.is_error and viewer.structured_content["error"]["code"] == "permission_denied"
    assert (Document.objects.count(), ConversationFile.objects.count()) == (before, 0)
