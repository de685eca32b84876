"""MCP fixtures: the server over real HTTP (the live server: Django's threaded WSGI server, as
``runserver`` serves), membership tokens, and the SDK's own client."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import httpx2
import pytest
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client

from core.memberships import membership_token_create
from core.models import Membership
from tests.acl_world import tenant_world


def key_for(user, tenant) -> str:
    """A new membership token of ``user`` in ``tenant`` (its key)."""
    membership = Membership.objects.get(tenant=tenant, user=user)
    return membership_token_create(membership=membership, name="mcp test")[1]


async def over_http(url: str, headers: dict, work: Callable[[ClientSession], Awaitable[Any]]) -> Any:
    async with httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(120.0)) as http:
        async with streamable_http_client(url, http_client=http) as (read, write):
            async with ClientSession(read, write) as session:
                await session.initialize()
                return await work(session)


def with_session(url: str, key: str | None, work: Callable[[ClientSession], Awaitable[Any]], **headers: str) -> Any:
    """Run ``work(session)`` with the SDK's client connected to ``url`` over Streamable HTTP,
    authenticated with ``key`` (none when ``None``); extra ``headers`` as given."""
    sent = {name.replace("_", "-"): value for name, value in headers.items()}
    if key is not None:
        sent["Authorization"] = f"Bearer {key}"
    return unwrapped(over_http(url, sent, work))


def unwrapped(coroutine: Awaitable[Any]) -> Any:
    """``asyncio.run(coroutine)``, raising the one error inside the SDK's task groups' exception
    groups (an ``MCPError`` the server answered) rather than the groups."""
    try:
        return asyncio.run(coroutine)
    except BaseExceptionGroup as group:
        error: BaseException = group
        while isinstance(error, BaseExceptionGroup) and len(error.exceptions) == 1:
            error = error.exceptions[0]
        raise error from None


def call(url: str, key: str, tool: str, **arguments):
    """One tool call through a fresh session; the SDK's ``CallToolResult``."""

    async def work(session: ClientSession):
        return await session.call_tool(tool, arguments)

    return with_session(url, key, work)


@pytest.fixture
def mcp_url(live_server) -> str:
    return f"{live_server.url}/mcp"


@pytest.fixture
def acme(transactional_db):
    """Tenant ``acme`` of ``tests.acl_world``: public, group-restricted and user-restricted documents."""
    return tenant_world("acme")


@pytest.fixture
def globex(transactional_db):
    """A second tenant built the same way, with its own marker words."""
    return tenant_world("globex")
