"""The SDK's Streamable HTTP transport (ASGI) inside a WSGI request.

The product stays a WSGI application (``runserver`` in development, gunicorn's threaded workers in
production): only ``/mcp`` needs ASGI. Each process runs one background thread with an asyncio
event loop holding the SDK's ``StreamableHTTPSessionManager``s (stateless: no session outlives a
request). A request's thread (``Exchange.respond``) submits its ASGI scope, body and ``send`` to
that loop and then serves two kinds of messages until the SDK's response is complete:

- the response itself (``http.response.start`` and the body parts), returned as Django's
  ``HttpResponse``, or as a ``StreamingHttpResponse`` when the SDK streams Server-Sent Events;
- *calls*: a tool's Django work (``mcp_server.server.Caller.call``), which the request thread runs
  itself, so it runs inside the request's middleware, with its row-level-security scope, its audit
  context and its database connection, exactly like a REST API view's work.

The loop thread never touches the database. A call's result or exception travels back to the
awaiting handler through an asyncio future.
"""

from __future__ import annotations

import asyncio
import logging
import os
import queue
import threading
from collections.abc import Callable, Iterator
from typing import Any

from django.http import HttpResponse, StreamingHttpResponse
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from mcp_types import INTERNAL_ERROR, ErrorData, JSONRPCError

from core.models import Membership
from mcp_server.server import server_build

logger = logging.getLogger(__name__)

SCOPE_KEY = "kb.mcp_exchange"  # the ASGI scope's entry holding the request's Exchange
# Headers the SDK never sees (credentials are checked before; the rest belong to the WSGI server).
_HIDDEN_REQUEST_HEADERS = {"authorization", "cookie", "proxy-authorization"}
_HOP_BY_HOP = {"connection", "keep-alive", "transfer-encoding", "content-length", "upgrade", "te", "trailer"}
_POLL_S = 1.0


def jsonrpc_error(message: str, *, status: int, code: int = INTERNAL_ERROR, data: Any = None) -> HttpResponse:
    """A JSON-RPC error (id null: the SDK's client pairs it with its request) as an HTTP response."""
    error = ErrorData(code=code, message=message) if data is None else ErrorData(code=code, message=message, data=data)
    body = JSONRPCError(jsonrpc="2.0", id=None, error=error)
    return HttpResponse(
        body.model_dump_json(by_alias=True, exclude_unset=True), status=status, content_type="application/json"
    )


class Bridge:
    """One process's event loop thread with the SDK's two stateless session managers: ``json``
    (each POST answered with one JSON body) and ``sse`` (each POST answered with an event stream,
    which carries progress notifications). Started on first use, again after a fork."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._pid: int | None = None
        self.loop: asyncio.AbstractEventLoop | None = None
        self.managers: dict[str, StreamableHTTPSessionManager] = {}
        self._thread: threading.Thread | None = None
        self._failure: BaseException | None = None

    def running(self) -> asyncio.AbstractEventLoop:
        """The running loop, starting the thread first if this process has none (or lost it).
        ``RuntimeError`` when it cannot start."""
        with self._lock:
            if self._pid == os.getpid() and self._thread is not None and self._thread.is_alive():
                assert self.loop is not None
                return self.loop
            ready = threading.Event()
            self._failure = None
            self._thread = threading.Thread(target=self._run, args=(ready,), name="kb-mcp-loop", daemon=True)
            self._thread.start()
            ready.wait(timeout=30)
            if self._failure is not None or self.loop is None or not self._thread.is_alive():
                raise RuntimeError("The MCP event loop did not start.") from self._failure
            self._pid = os.getpid()
            return self.loop

    def alive(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def _run(self, ready: threading.Event) -> None:
        try:
            asyncio.run(self._main(ready))
        except BaseException as exc:  # noqa: BLE001 - recorded for running(), then the thread ends
            self._failure = exc
            logger.exception("The MCP event loop stopped")
        finally:
            ready.set()

    async def _main(self, ready: threading.Event) -> None:
        server = server_build(caller_for=_exchange_of)
        managers = {
            "json": StreamableHTTPSessionManager(app=server, json_response=True, stateless=True),
            "sse": StreamableHTTPSessionManager(app=server, json_response=False, stateless=True),
        }
        async with managers["json"].run(), managers["sse"].run():
            self.managers = managers
            self.loop = asyncio.get_running_loop()
            ready.set()
            await asyncio.Event().wait()  # until the process ends (a daemon thread)


bridge = Bridge()


def _exchange_of(ctx) -> Exchange:
    request = getattr(ctx, "request", None)
    exchange = getattr(request, "scope", {}).get(SCOPE_KEY) if request is not None else None
    if exchange is None:
        raise RuntimeError("An MCP message reached the server without its HTTP request.")
    return exchange


class Exchange:
    """One HTTP request's trip through the SDK, and its ``Caller`` (``mcp_server.server``).

    Built and driven by the request's thread (``respond``); ``call``, ``progress``, ``_receive``
    and ``_send`` are used by the SDK's handlers on the loop.
    """

    def __init__(self, *, membership: Membership, scope: dict, body: bytes, streamed: bool) -> None:
        self.membership = membership
        self.scope = {**scope, SCOPE_KEY: self}
        self.body = body
        self.streamed = streamed
        self.loop = bridge.running()
        self._inbox: queue.SimpleQueue = queue.SimpleQueue()
        self._body_sent = False
        self._finished: asyncio.Event | None = None
        self._future = None

    # ---- on the loop ------------------------------------------------------------------------

    async def call(self, work: Callable[..., Any]) -> Any:
        """Have the request's thread run ``work(membership=...)``; its result, or its exception raised here."""
        future = asyncio.get_running_loop().create_future()
        self._inbox.put(("call", work, future))
        return await future

    def progress(self, ctx, progress: float, message: str) -> None:
        """From the request's thread: a progress notification for ``ctx``'s request (not awaited)."""
        asyncio.run_coroutine_threadsafe(ctx.session.report_progress(progress, None, message), self.loop)

    async def _receive(self) -> dict:
        if not self._body_sent:
            self._body_sent = True
            return {"type": "http.request", "body": self.body, "more_body": False}
        await self._finished_event().wait()
        return {"type": "http.disconnect"}

    async def _send(self, message: dict) -> None:
        self._inbox.put(("send", message))

    def _finished_event(self) -> asyncio.Event:
        if self._finished is None:
            self._finished = asyncio.Event()
        return self._finished

    async def _serve(self) -> None:
        self._finished_event()
        manager = bridge.managers["sse" if self.streamed else "json"]
        await manager.handle_request(self.scope, self._receive, self._send)

    # ---- on the request's thread --------------------------------------------------------------

    def respond(self) -> HttpResponse:
        """Run the request through the SDK and return its response (streamed when the SDK streams)."""
        self._future = asyncio.run_coroutine_threadsafe(self._serve(), self.loop)
        self._future.add_done_callback(lambda future: self._inbox.put(("done", future)))
        start: dict | None = None
        parts: list[bytes] = []
        while True:
            item = self._next()
            if item[0] == "call":
                self._run_call(item[1], item[2])
            elif item[0] == "send":
                message = item[1]
                if message["type"] == "http.response.start":
                    start = message
                elif message["type"] == "http.response.body" and start is not None:
                    parts.append(message.get("body", b""))
                    if not message.get("more_body", False):
                        self._finish()
                        return self._response(start, b"".join(parts))
                    if self.streamed and len(parts) == 1:
                        return self._streaming_response(start, parts)
            else:  # done without a complete response
                self._finish()
                if item[1].exception() is not None:
                    logger.error("The MCP request failed", exc_info=item[1].exception())
                if start is not None:
                    return self._response(start, b"".join(parts))
                return jsonrpc_error("The MCP server failed to answer; the error was logged.", status=500)

    def _next(self) -> tuple:
        while True:
            try:
                return self._inbox.get(timeout=_POLL_S)
            except queue.Empty:
                if not bridge.alive():
                    raise RuntimeError("The MCP event loop stopped while serving a request.") from None

    def _run_call(self, work: Callable[..., Any], future: asyncio.Future) -> None:
        try:
            result = work(membership=self.membership)
        except BaseException as exc:  # noqa: BLE001 - handed to the awaiting handler
            self.loop.call_soon_threadsafe(_settle, future, None, exc)
        else:
            self.loop.call_soon_threadsafe(_settle, future, result, None)

    def _finish(self) -> None:
        """The response is complete or abandoned: release the SDK's wait for a disconnect."""

        def finished() -> None:
            self._finished_event().set()

        self.loop.call_soon_threadsafe(finished)

    def _response(self, start: dict, body: bytes) -> HttpResponse:
        response = HttpResponse(body, status=start["status"])
        _copy_headers(start, response)
        return response

    def _streaming_response(self, start: dict, parts: list[bytes]) -> StreamingHttpResponse:
        response = StreamingHttpResponse(self._stream(list(parts)), status=start["status"])
        _copy_headers(start, response)
        response["X-Accel-Buffering"] = "no"  # a proxy in front must not hold the events back
        return response

    def _stream(self, parts: list[bytes]) -> Iterator[bytes]:
        """The event stream's parts as they come; calls made meanwhile still run on this thread."""
        try:
            yield from parts
            while True:
                item = self._next()
                if item[0] == "call":
                    self._run_call(item[1], item[2])
                elif item[0] == "send" and item[1]["type"] == "http.response.body":
                    yield item[1].get("body", b"")
                    if not item[1].get("more_body", False):
                        return
                elif item[0] == "done":
                    return
        finally:  # the end, or the client went away (the server closes the iterator)
            self._finish()
            if self._future is not None and not self._future.done():
                self._future.cancel()


def _settle(future: asyncio.Future, result: Any, exc: BaseException | None) -> None:
    if future.done():
        return
    if exc is not None:
        future.set_exception(exc)
    else:
        future.set_result(result)


def _copy_headers(start: dict, response: HttpResponse) -> None:
    for name, value in start.get("headers", []):
        name = name.decode("latin-1")
        if name.lower() not in _HOP_BY_HOP:
            response[name] = value.decode("latin-1")


def asgi_scope(request) -> dict:
    """The ASGI HTTP scope of a Django request (its credentials and cookies left out)."""
    headers = []
    for name, value in request.headers.items():
        if name.lower() in _HIDDEN_REQUEST_HEADERS:
            continue
        try:
            headers.append((name.lower().encode("latin-1"), value.encode("latin-1")))
        except UnicodeEncodeError:
            continue
    meta = request.META
    try:
        server = (meta.get("SERVER_NAME", "localhost"), int(meta.get("SERVER_PORT") or 80))
    except ValueError:
        server = (meta.get("SERVER_NAME", "localhost"), 80)
    return {
        "type": "http",
        "asgi": {"version": "3.0", "spec_version": "2.3"},
        "http_version": "1.1",
        "method": request.method,
        "scheme": request.scheme,
        "path": request.path,
        "raw_path": request.path.encode("utf-8"),
        "query_string": meta.get("QUERY_STRING", "").encode("latin-1", "replace"),
        "root_path": "",
        "headers": headers,
        "client": (meta.get("REMOTE_ADDR") or "", 0),
        "server": server,
        "state": {},
    }
