"""The MCP server at /mcp over real HTTP, with the SDK's own client: tools, resources, errors,
authentication, the rate limit and streamed responses."""

from __future__ import annotations

import asyncio
import json

import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError
from mcp_types.version import MODERN_PROTOCOL_VERSIONS
from rest_framework.authtoken.models import Token
from rest_framework.throttling import SimpleRateThrottle

from core.memberships import membership_token_revoke
from core.models import Membership, MembershipToken
from knowledge.models import Chunk, Document
from knowledge.services import documents_ingest
from tests.conftest import DATABASES_2023, DATABASES_2025
from tests.factories import SourceFactory
from tests.mcp.conftest import call, key_for, with_session

TOOLS = {"search", "ask", "fetch", "list_sources", "attach_file"}


def error_of(result) -> dict:
    """A tool error's ``{"code", "message"}``."""
    assert result.is_error, result
    return result.structured_content["error"]


@pytest.fixture
def member_key(acme):
    return key_for(acme.users["member"], acme.tenant)


@pytest.fixture
def releases(acme):
    """A document of acme's public handbook in two versions: 2023 (PostgreSQL 12) and 2025 (14)."""
    documents_ingest(tenant=acme.tenant, source=acme.sources["handbook"], documents=[DATABASES_2023])
    documents_ingest(tenant=acme.tenant, source=acme.sources["handbook"], documents=[DATABASES_2025])
    return Document.objects.get(tenant=acme.tenant, external_id="ref/databases")


def test_the_five_tools_are_listed_with_their_argument_schemas(mcp_url, member_key):
    async def work(session):
        return await session.list_tools()

    tools = {tool.name: tool for tool in with_session(mcp_url, member_key, work).tools}

    assert set(tools) == TOOLS
    search = tools["search"].input_schema
    assert search["required"] == ["query"] and search["additionalProperties"] is False
    assert search["properties"]["k"]["maximum"] == 50
    assert set(search["properties"]["mode"]["enum"]) == {"hybrid", "lexical", "dense"}
    assert "simple" in json.dumps(tools["ask"].input_schema["properties"]["pipeline"])
    assert tools["search"].annotations.read_only_hint is True


def test_search_returns_ranked_chunks_with_their_document_version_date_and_score(mcp_url, member_key, acme):
    result = call(mcp_url, member_key, "search", query="patch the bicycle tyre puncture", k=5)

    assert not result.is_error
    top = result.structured_content["results"][0]
    assert top["rank"] == 1 and top["document_id"] == acme.documents["public"].pk
    assert top["version"] == 1 and top["version_current"] is True and len(top["version_date"]) == 10
    assert top["score"] > 0 and "pubzqacme" in top["text"] and top["source"] == "handbook"
    assert json.loads(result.content[0].text) == result.structured_content


def test_search_as_of_a_date_finds_the_version_current_then(mcp_url, member_key, releases):
    older = call(mcp_url, member_key, "search", query="Django supports PostgreSQL", as_of="2024-01-01", k=1)
    newer = call(mcp_url, member_key, "search", query="Django supports PostgreSQL", k=1)

    assert older.structured_content["results"][0]["text"].endswith("PostgreSQL 12 and higher.")
    assert older.structured_content["results"][0]["version"] == 1
    assert older.structured_content["results"][0]["version_date"] == "2023-04-03"
    assert newer.structured_content["results"][0]["version"] == 2


def test_search_in_a_named_source_only_searches_that_source(mcp_url, acme):
    key = key_for(acme.users["owner"], acme.tenant)

    result = call(mcp_url, key, "search", query="bicycle tyre puncture", sources=["board"])

    assert {row["source"] for row in result.structured_content["results"]} == {"board"}


def test_ask_answers_with_a_short_answer_cited_explanation_and_trace_and_keeps_the_conversation(
    mcp_url, member_key, acme
):
    async def work(session):
        first = await session.call_tool("ask", {"question": "How do I fix a flat bicycle tyre?", "extractive": True})
        follow_up = await session.call_tool(
            "ask",
            {"question": "And then?", "extractive": True, "conversation": first.structured_content["conversation_id"]},
        )
        return first, follow_up

    first, follow_up = with_session(mcp_url, member_key, work)

    answer = first.structured_content
    assert not first.is_error and answer["found"] is True
    assert answer["short_answer"] == "" and answer["lead"]["document"]  # a how-to leads with its passage
    assert "[1]" in answer["answer"] and answer["trace_id"] and answer["degraded"] is False
    citation = answer["citations"][0]
    assert citation["n"] == 1 and citation["document_id"] == acme.documents["public"].pk
    assert citation["version"] == 1 and len(citation["version_date"]) == 10 and "pubzqacme" in citation["text"]
    assert follow_up.structured_content["conversation_id"] == answer["conversation_id"]
    assert follow_up.structured_content["turn"] == answer["turn"] + 1


def test_ask_through_a_named_pipeline_says_which_pipeline_answered(mcp_url, member_key):
    result = call(mcp_url, member_key, "ask", question="How do I fix a flat tyre?", pipeline="expand", extractive=True)

    assert not result.is_error and result.structured_content["pipeline"] == "expand"


def test_fetch_returns_a_documents_text_versions_and_source_page_by_page(mcp_url, member_key, releases):
    current = call(mcp_url, member_key, "fetch", document_id=releases.pk)
    first = call(mcp_url, member_key, "fetch", document_id=releases.pk, version=1, max_chars=10)
    rest = call(mcp_url, member_key, "fetch", document_id=releases.pk, version=1, offset=10)

    data = current.structured_content
    assert data["type"] == "document" and data["version"]["number"] == 2 and "PostgreSQL 14" in data["text"]
    assert [v["number"] for v in data["versions"]] == [2, 1] and data["versions"][1]["date"] == "2023-04-03"
    assert data["source"]["name"] == "handbook" and data["next_offset"] is None
    page = first.structured_content
    assert page["text"] == "Databases\n" and page["next_offset"] == 10 and page["length"] > 10
    assert page["text"] + rest.structured_content["text"] == "Databases\n\nDjango supports PostgreSQL 12 and higher."


def test_fetch_returns_a_chunk_with_its_document_and_versions(mcp_url, member_key, acme):
    chunk = Chunk.objects.filter(version__document=acme.documents["public"]).first()

    data = call(mcp_url, member_key, "fetch", chunk_id=chunk.pk).structured_content

    assert data["type"] == "chunk" and data["chunk_id"] == chunk.pk and data["text"] == chunk.text
    assert data["document_id"] == acme.documents["public"].pk and data["version"]["number"] == 1
    assert [v["number"] for v in data["versions"]] == [1] and data["source"]["name"] == "handbook"


def test_list_sources_and_the_resources_name_the_sources_the_member_may_see(mcp_url, member_key, acme):
    async def work(session):
        tool = await session.call_tool("list_sources", {})
        resources = await session.list_resources()
        templates = await session.list_resource_templates()
        read = await session.read_resource(f"kb://sources/{acme.sources['handbook'].pk}")
        document = await session.read_resource(f"kb://documents/{acme.documents['public'].pk}")
        return tool, resources, templates, read, document

    tool, resources, templates, read, document = with_session(mcp_url, member_key, work)

    rows = tool.structured_content["sources"]
    assert [row["name"] for row in rows] == ["handbook"]  # not "board", restricted to its group
    assert rows[0]["documents"] == 1  # the public document; "private" is granted to another user
    assert [(r.name, str(r.uri)) for r in resources.resources] == [("handbook", rows[0]["uri"])]
    assert {t.uri_template for t in templates.resource_templates} == {
        "kb://sources/{source_id}",
        "kb://documents/{document_id}",
    }
    listed = json.loads(read.contents[0].text)["documents_listed"]
    assert [d["document_id"] for d in listed] == [acme.documents["public"].pk]
    assert "pubzqacme" in json.loads(document.contents[0].text)["text"]


@pytest.mark.parametrize(
    ("tool", "arguments", "words"),
    [
        ("search", {"query": "tyre", "k": 0}, "k: Input should be greater than or equal to 1"),
        ("search", {"query": "tyre", "k": 51}, "k: Input should be less than or equal to 50"),
        ("search", {}, "query: Field required"),
        ("search", {"query": ""}, "query: String should have at least 1 character"),
        ("search", {"query": "tyre", "mode": "fuzzy"}, "mode: Input should be 'hybrid', 'lexical' or 'dense'"),
        ("search", {"query": "tyre", "limit": 3}, "limit: Extra inputs are not permitted"),
        ("search", {"query": "tyre", "as_of": "yesterday"}, "as_of: String should match pattern"),
        ("ask", {"question": "x" * 2001}, "question: String should have at most 2000 characters"),
        ("ask", {"question": "tyre?", "pipeline": "magic"}, "pipeline: Input should be"),
        ("ask", {"question": "tyre?", "conversation": 0}, "conversation: Input should be greater than or equal to 1"),
        ("fetch", {}, "give exactly one of document_id and chunk_id"),
        ("fetch", {"document_id": 1, "chunk_id": 1}, "give exactly one of document_id and chunk_id"),
        ("fetch", {"chunk_id": 1, "version": 1}, "version goes with document_id"),
        ("fetch", {"document_id": 2**63}, "document_id: Input should be less than or equal to"),
    ],
)
def test_bad_arguments_are_refused_with_a_message_naming_the_argument(mcp_url, member_key, tool, arguments, words):
    error = error_of(call(mcp_url, member_key, tool, **arguments))

    assert error["code"] == "invalid_arguments"
    assert error["message"].startswith(f"Invalid arguments for {tool}: ") and words in error["message"]


@pytest.mark.parametrize(
    ("tool", "arguments", "code", "words"),
    [
        ("search", {"query": "tyre", "as_of": "2025-02-30"}, "invalid_as_of", "as_of must be a date"),
        ("search", {"query": "   "}, "invalid_input", "empty"),
        ("search", {"query": "tyre", "sources": ["nowhere"]}, "unknown_source", "Unknown source(s): nowhere."),
        ("ask", {"question": "tyre?", "sources": ["nowhere"]}, "unknown_source", "Unknown source(s): nowhere."),
        ("ask", {"question": "tyre?", "conversation": 987654}, "not_found", "987654"),
        ("fetch", {"document_id": 987654}, "not_found", "Document 987654 not found."),
        ("fetch", {"chunk_id": 987654}, "not_found", "Chunk 987654 not found."),
    ],
)
def test_input_the_services_refuse_is_a_tool_error_with_their_code_and_message(
    mcp_url, member_key, tool, arguments, code, words
):
    error = error_of(call(mcp_url, member_key, tool, **arguments))

    assert error["code"] == code and words in error["message"]


def test_an_offset_past_the_end_of_a_document_is_refused(mcp_url, member_key, acme):
    error = error_of(call(mcp_url, member_key, "fetch", document_id=acme.documents["public"].pk, offset=10**6))

    assert error["code"] == "invalid_offset" and "past the end of the text" in error["message"]


def test_an_unknown_tool_or_resource_is_an_mcp_error_naming_what_exists(mcp_url, member_key):
    async def unknown_tool(session):
        return await session.call_tool("delete_everything", {})

    async def unknown_resource(session):
        return await session.read_resource("kb://secrets/1")

    with pytest.raises(MCPError, match="Unknown tool 'delete_everything'; the tools are search, ask, fetch"):
        with_session(mcp_url, member_key, unknown_tool)
    with pytest.raises(MCPError, match="Unknown resource 'kb://secrets/1'"):
        with_session(mcp_url, member_key, unknown_resource)


def _initialize_with(url: str, key: str | None):
    async def work(session):
        return await session.list_tools()

    return with_session(url, key, work)


def test_a_missing_or_bad_token_is_refused_before_anything_runs(mcp_url, acme):
    user = acme.users["member"]
    plain = Token.objects.create(user=user).key
    revoked = key_for(user, acme.tenant)
    membership_token_revoke(tenant=acme.tenant, token_id=MembershipToken.objects.order_by("-pk").first().pk)

    for key, words in [
        (None, "Authentication required"),
        ("kbm_" + "0" * 40, "Invalid token"),
        (revoked, "Invalid token"),
        (plain, "Not a membership token"),
    ]:
        with pytest.raises(MCPError, match=words):
            _initialize_with(mcp_url, key)


def test_a_refused_token_is_a_401_json_rpc_error_asking_for_a_bearer_token(mcp_url):
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}
    response = httpx2.post(mcp_url, json=body, headers={"Accept": "application/json, text/event-stream"})

    assert response.status_code == 401 and response.headers["WWW-Authenticate"].startswith("Bearer")
    assert response.json()["error"]["data"] == {"code": "not_authenticated"}
    assert "set-cookie" not in response.headers


def test_an_inactive_users_token_is_refused(mcp_url, acme, member_key):
    user = acme.users["member"]
    user.is_active = False
    user.save(update_fields=["is_active"])

    with pytest.raises(MCPError, match="User inactive"):
        _initialize_with(mcp_url, member_key)


def test_a_token_naming_another_tenant_in_x_tenant_is_refused(mcp_url, member_key, globex):
    async def work(session):
        return await session.list_tools()

    with pytest.raises(MCPError, match="This API token belongs to tenant 'acme', not 'globex'"):
        with_session(mcp_url, member_key, work, X_Tenant="globex")


def test_get_delete_and_other_methods_are_answered_405_so_no_stream_holds_a_server_thread(mcp_url, member_key):
    headers = {"Authorization": f"Bearer {member_key}", "Accept": "text/event-stream"}

    for method in ("GET", "DELETE", "OPTIONS"):
        response = httpx2.request(method, mcp_url, headers=headers, timeout=10)
        assert response.status_code == 405 and response.headers["Allow"] == "POST"
        assert "POST each JSON-RPC message" in response.json()["error"]["message"]


def test_a_malformed_or_oversized_body_is_a_json_rpc_error_not_a_500(mcp_url, member_key):
    headers = {
        "Authorization": f"Bearer {member_key}",
        "Accept": "application/json, text/event-stream",
        "Content-Type": "application/json",
    }

    malformed = httpx2.post(mcp_url, content=b'{"jsonrpc": "2.0", "id": 1, "method": ', headers=headers)
    oversized = httpx2.post(mcp_url, content=b" " * (1024 * 1024 + 1), headers=headers)

    assert malformed.status_code == 400 and "error" in malformed.json()
    assert oversized.status_code == 413 and oversized.json()["error"]["data"] == {"code": "payload_too_large"}


def test_the_rest_apis_per_user_rate_limit_applies_to_mcp_requests(mcp_url, member_key, monkeypatch):
    from django.core.cache import cache

    cache.clear()
    monkeypatch.setattr(SimpleRateThrottle, "THROTTLE_RATES", {"anon": "60/min", "user": "4/min"})
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}
    headers = {"Authorization": f"Bearer {member_key}", "Accept": "application/json, text/event-stream"}

    codes = [httpx2.post(mcp_url, json=body, headers=headers).status_code for _ in range(5)]
    refused = httpx2.post(mcp_url, json=body, headers=headers)

    cache.clear()
    assert codes == [200, 200, 200, 200, 429]
    assert refused.status_code == 429 and int(refused.headers["Retry-After"]) > 0
    assert "Too many requests" in refused.json()["error"]["message"]


def test_a_client_of_the_newest_protocol_version_is_served_without_a_handshake(mcp_url, member_key):
    async def work():
        http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {member_key}"}, timeout=60)
        async with http, Client(streamable_http_client(mcp_url, http_client=http)) as client:
            tools = await client.list_tools()
            found = await client.call_tool("search", {"query": "bicycle tyre"})
            return client.session.protocol_version, tools, found

    version, tools, found = asyncio.run(work())

    assert {tool.name for tool in tools.tools} == TOOLS
    assert not found.is_error and found.structured_content["count"] == 1
    assert version in MODERN_PROTOCOL_VERSIONS  # served without the initialize handshake


def test_streamed_responses_carry_the_answers_progress_to_the_sdks_client(mcp_url, member_key, settings):
    settings.KB_MCP_SSE = True
    seen: list[str] = []

    async def progress(value, total, message):
        seen.append(message)

    async def work(session):
        return await session.call_tool(
            "ask", {"question": "How do I fix a flat tyre?", "extractive": True}, progress_callback=progress
        )

    result = with_session(mcp_url, member_key, work)

    assert not result.is_error and result.structured_content["found"] is True
    assert "retrieve done" in seen and "generate done" in seen


def test_a_viewers_answer_is_given_but_not_kept(mcp_url, acme):
    key = key_for(acme.users["viewer"], acme.tenant)

    answer = call(mcp_url, key, "ask", question="How do I fix a flat tyre?", extractive=True).structured_content

    assert answer["found"] is True and answer["conversation_id"] is None


def test_membership_roles_decide_what_the_same_token_kind_sees(mcp_url, acme):
    owner = key_for(acme.users["owner"], acme.tenant)
    assert Membership.objects.get(user=acme.users["owner"]).role == "owner"

    names = [row["name"] for row in call(mcp_url, owner, "list_sources").structured_content["sources"]]

    assert names == ["board", "handbook"]


def test_a_source_created_later_is_listed_on_the_next_request(mcp_url, member_key, acme):
    SourceFactory(tenant=acme.tenant, name="wiki")

    names = [row["name"] for row in call(mcp_url, member_key, "list_sources").structured_content["sources"]]

    assert names == ["handbook", "wiki"]
