"""MCP over stdio (``manage.py mcp --token KEY``), for desktop assistants that start the server as
a child process.

The SDK reads JSON-RPC from stdin and writes to stdout (it points the process's own stdout at
stderr meanwhile, so nothing else can corrupt the stream). Django's work runs on one worker thread
(``StdioCaller``), never on the event loop: each call authenticates the token again (a token
revoked meanwhile stops working at once), runs in a request-like row-level-security scope bound to
the token's tenant and user (as ``core.memberships.membership_for_request`` binds a request's),
and counts against the REST API's per-user rate.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import anyio
from django.db import close_old_connections, connections
from mcp.server.stdio import stdio_server

from core.rls import rls_request_bind, rls_request_scope
from mcp_server.auth import rate_limit_check, token_for_key
from mcp_server.server import server_build


class StdioCaller:
    """The ``Caller`` of a stdio server: Django's work on one dedicated thread, as the token's member."""

    def __init__(self, key: str) -> None:
        self.key = key
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="kb-mcp-django")
        self.loop: asyncio.AbstractEventLoop | None = None

    async def call(self, work: Callable[..., Any]) -> Any:
        self.loop = asyncio.get_running_loop()
        return await asyncio.wrap_future(self._executor.submit(self._run, work))

    def _run(self, work: Callable[..., Any]) -> Any:
        close_old_connections()  # as Django does around each request: a dropped connection is replaced
        try:
            with rls_request_scope():
                membership = token_for_key(self.key).membership
                rls_request_bind(tenant_id=membership.tenant_id, user_id=membership.user_id)
                rate_limit_check(user=membership.user)
                return work(membership=membership)
        finally:
            close_old_connections()

    def progress(self, ctx, progress: float, message: str) -> None:
        if self.loop is not None:
            asyncio.run_coroutine_threadsafe(ctx.session.report_progress(progress, None, message), self.loop)

    def close(self) -> None:
        """Close the worker thread's database connection and stop the thread."""
        self._executor.submit(connections.close_all).result()
        self._executor.shutdown()


def stdio_serve(*, key: str) -> None:
    """Serve MCP on stdin/stdout as the member of membership token ``key`` until stdin closes."""
    caller = StdioCaller(key)
    server = server_build(caller_for=lambda ctx: caller)

    async def serve() -> None:
        async with stdio_server() as (read_stream, write_stream):
            await server.run(read_stream, write_stream, server.create_initialization_options())

    try:
        anyio.run(serve)
    finally:
        caller.close()
