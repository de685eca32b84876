"""What an MCP client may never see: another tenant's documents, and documents its access rules
hide. Every tool and resource is tried with the hidden documents' ids and words; each test also
shows that someone allowed does see them, so it can fail."""

from __future__ import annotations

import asyncio
import json

import pytest
from mcp.shared.exceptions import MCPError

from core.tenancy import TenantScopedQuerySet
from knowledge.models import Chunk
from retrieval.filters import RetrievalFilter
from tests.mcp.conftest import key_for, over_http, with_session

QUERY = "patch the bicycle tyre puncture with glue"


def _everything(url: str, key: str, *, documents, sources) -> tuple[str, list[str]]:
    """Every tool's and resource's answer for ``key`` as one text (searches in each mode, an
    answer, the source list and resources), and the errors of fetching ``documents`` and
    ``sources`` by id (tool errors' codes and resource errors' messages)."""

    fetches = []
    for document in documents:
        chunk = Chunk.objects.filter(version__document=document).first()
        fetches += [{"document_id": document.pk}, {"chunk_id": chunk.pk}]
    uris = [f"kb://documents/{d.pk}" for d in documents] + [f"kb://sources/{s.pk}" for s in sources]

    async def work(session):
        texts, refusals = [], []
        for mode in ("hybrid", "lexical", "dense"):
            found = await session.call_tool("search", {"query": QUERY, "k": 50, "mode": mode})
            texts.append(json.dumps(found.structured_content))
        answer = await session.call_tool("ask", {"question": QUERY, "k": 20, "extractive": True})
        texts.append(json.dumps(answer.structured_content))
        listed = await session.call_tool("list_sources", {})
        texts.append(json.dumps(listed.structured_content))
        resources = await session.list_resources()
        texts.append(json.dumps([r.model_dump(mode="json") for r in resources.resources]))
        for arguments in fetches:
            fetched = await session.call_tool("fetch", arguments)
            texts.append(json.dumps(fetched.structured_content))
            refusals.append(fetched.structured_content.get("error", {}).get("code", "seen"))
        for uri in uris:
            refusals.append(await _read(session, uri, texts))
        return "\n".join(texts), refusals

    return with_session(url, key, work)


async def _read(session, uri: str, texts: list[str]) -> str:
    try:
        read = await session.read_resource(uri)
    except MCPError as exc:
        return f"error {exc.error.code}: {exc.error.message}"
    texts.append(read.contents[0].text)
    return "seen"


def _marker(document) -> str:
    return document.title.split()[-1]


@pytest.fixture
def worlds(acme, globex):
    return acme, globex


def test_another_tenants_token_sees_nothing_of_this_tenant(mcp_url, worlds):
    acme, globex = worlds
    documents = list(acme.documents.values())
    sources = list(acme.sources.values())

    outsider, refusals = _everything(
        mcp_url, key_for(globex.users["owner"], globex.tenant), documents=documents, sources=sources
    )
    insider, allowed = _everything(
        mcp_url, key_for(acme.users["owner"], acme.tenant), documents=documents, sources=sources
    )

    for document in documents:
        assert _marker(document) not in outsider
        assert _marker(document) in insider
    assert "acme" not in outsider.replace("globex", "")
    assert "pubzqglobex" in outsider  # the outsider's own tenant answers normally
    assert len(refusals) == 11 and all(r == "not_found" or r.startswith("error -32002: ") for r in refusals)
    assert set(allowed) == {"seen"}


def test_a_restricted_document_is_invisible_to_a_member_outside_its_group(mcp_url, acme):
    hidden = [acme.documents["board"], acme.documents["private"]]
    sources = [acme.sources["board"]]

    member, refusals = _everything(
        mcp_url, key_for(acme.users["member"], acme.tenant), documents=hidden, sources=sources
    )
    board, board_sees = _everything(
        mcp_url, key_for(acme.users["board"], acme.tenant), documents=hidden[:1], sources=sources
    )

    for document in hidden:
        assert _marker(document) not in member
    assert "pubzqacme" in member  # the public document is found
    assert len(refusals) == 7 and all(r == "not_found" or r.startswith("error -32002: ") for r in refusals)
    assert _marker(acme.documents["board"]) in board and set(board_sees) == {"seen"}
    assert _marker(acme.documents["private"]) not in board  # granted to another user only


@pytest.mark.parametrize("rls", [True, False])
def test_without_the_tenant_filter_row_level_security_still_keeps_another_tenant_out_unless_switched_off(
    mcp_url, worlds, monkeypatch, settings, rls
):
    """The tools run inside the request's row-level-security scope, bound to the token's tenant: with
    the application's tenant filter broken (every ``for_tenant`` a no-op, the retrievers asking for
    the other tenant's chunks), PostgreSQL still returns nothing of acme to globex. The control
    (``KB_RLS`` off) shows the broken build does leak, so the test can fail."""
    acme, globex = worlds
    key = key_for(globex.users["owner"], globex.tenant)
    settings.KB_RLS = rls
    monkeypatch.setattr(TenantScopedQuerySet, "for_tenant", lambda self, tenant: self)
    params = RetrievalFilter.params
    monkeypatch.setattr(RetrievalFilter, "params", lambda self: {**params(self), "filter_tenant": acme.tenant.pk})

    seen, _ = _everything(mcp_url, key, documents=list(acme.documents.values()), sources=list(acme.sources.values()))

    leaked = [_marker(document) for document in acme.documents.values() if _marker(document) in seen]
    assert bool(leaked) is (not rls), leaked


def test_clients_of_two_tenants_served_at_the_same_time_each_see_only_their_own(mcp_url, worlds):
    acme, globex = worlds
    keys = {"acme": key_for(acme.users["owner"], acme.tenant), "globex": key_for(globex.users["owner"], globex.tenant)}

    async def one(key):
        async def work(session):
            found = await session.call_tool("search", {"query": QUERY, "k": 50})
            return json.dumps(found.structured_content)

        return await over_http(mcp_url, {"Authorization": f"Bearer {key}"}, work)

    async def both():
        return await asyncio.gather(*(one(keys[name]) for name in ["acme", "globex"] * 4))

    answers = asyncio.run(both())

    for name, text in zip(["acme", "globex"] * 4, answers, strict=True):
        other = "globex" if name == "acme" else "acme"
        assert f"pubzq{name}" in text and f"boardzq{name}" in text and f"zq{other}" not in text
