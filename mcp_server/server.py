"""The MCP server: the tools of ``mcp_server.tools`` and the tenant's sources as resources, on the
official SDK's low-level ``Server``.

The SDK's handlers run on an asyncio event loop; Django's ORM must not. Each handler therefore
hands its work to a ``Caller``, which runs it where Django code belongs and awaits the result:
over HTTP, back on the request's own thread, inside its middleware (the request's row-level
security scope, audit context and database connection; ``mcp_server.http``); over stdio, on one
worker thread bound to the token's tenant (``mcp_server.stdio``).

Errors:

- arguments that do not match a tool's schema, and every ``core.errors.ApplicationError`` a tool
  raises (bad input, a hidden or unknown id, refused access, a failed model endpoint), come back as
  a tool result with ``isError`` true, its text ``"<code>: <message>"`` and its structured content
  ``{"error": {"code", "message"}}``, so the assistant can read and correct them;
- an unknown tool, or an unknown or hidden resource, is a JSON-RPC error (``-32602`` invalid params,
  ``-32002`` resource not found) with a clear message;
- anything unexpected is logged and answered as a tool error ``internal_error`` (never a 500).
"""

from __future__ import annotations

import itertools
import json
import logging
import re
from collections.abc import Callable
from functools import partial
from typing import Any, Protocol, TypeVar

import mcp_types as types
from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel import Server
from mcp.shared.exceptions import MCPError
from mcp.shared.jsonrpc_dispatcher import progress_token_from_params
from pydantic import ValidationError

from core.errors import ApplicationError, NotFound
from core.models import Membership
from mcp_server.selectors import source_with_documents
from mcp_server.tools import (
    FETCH_MAX_CHARS,
    TOOLS,
    FetchArguments,
    document_uri,
    fetch_run,
    source_row,
    source_rows,
)

logger = logging.getLogger(__name__)

T = TypeVar("T")

SERVER_NAME = "knowledge-base"
INSTRUCTIONS = (
    "The team's knowledge base. list_sources shows where the documents come from; search finds passages "
    "(with document, version and date); fetch reads a document or chunk by id; ask answers a question with "
    "cited passages and keeps it in your conversation. You only ever see what your membership may see."
)
RESOURCE_NOT_FOUND = -32002  # the MCP specification's code for an unknown resource
_RESOURCE = re.compile(r"^kb://(sources|documents)/(\d{1,19})$")
SOURCE_DOCUMENTS_LISTED = 200


class Caller(Protocol):
    """Where one MCP message's Django work runs, and as whom."""

    async def call(self, work: Callable[..., T]) -> T:
        """Run ``work(membership=<the caller's membership>)`` in Django's world (the right thread,
        the tenant's row-level-security scope) and return its result or raise its exception
        (``ApplicationError`` when the member is refused, e.g. ``throttled``)."""
        ...

    def progress(self, ctx: ServerRequestContext, progress: float, message: str) -> None:
        """Send a progress notification for ``ctx``'s request from any thread, without waiting
        (dropped when the client asked for none or the transport cannot carry it)."""
        ...


def _error_result(code: str, message: str) -> types.CallToolResult:
    return types.CallToolResult(
        content=[types.TextContent(type="text", text=f"{code}: {message}")],
        structured_content={"error": {"code": code, "message": message}},
        is_error=True,
    )


def _describe(exc: ValidationError) -> str:
    """Pydantic's errors in one line: ``k: Input should be less than or equal to 50; ...``."""
    parts = []
    for error in exc.errors():
        where = ".".join(str(part) for part in error["loc"])
        message = error["msg"].removeprefix("Value error, ")
        parts.append(f"{where}: {message}" if where else message)
    return "; ".join(parts)


# Tools that store something: ``ask`` keeps the answer in the member's conversation, ``attach_file`` a file.
WRITING_TOOLS = ("ask", "attach_file")


def _tool_list() -> list[types.Tool]:
    return [
        types.Tool(
            name=spec.name,
            title=spec.title,
            description=spec.description,
            input_schema=spec.arguments.model_json_schema(),
            annotations=types.ToolAnnotations(
                title=spec.title,
                read_only_hint=spec.name not in WRITING_TOOLS,
                destructive_hint=False,
                open_world_hint=False,
            ),
        )
        for spec in TOOLS.values()
    ]


def server_build(*, caller_for: Callable[[ServerRequestContext], Caller]) -> Server:
    """A low-level SDK ``Server`` answering ``tools/list``, ``tools/call``, ``resources/list``,
    ``resources/templates/list`` and ``resources/read``; ``caller_for(ctx)`` says where and as
    whom each message's work runs."""
    tools = _tool_list()

    async def list_tools(ctx: ServerRequestContext, params: Any) -> types.ListToolsResult:
        return types.ListToolsResult(tools=tools)

    async def call_tool(ctx: ServerRequestContext, params: types.CallToolRequestParams) -> types.CallToolResult:
        return await _tool_call(ctx, params, caller=caller_for(ctx))

    async def list_resources(ctx: ServerRequestContext, params: Any) -> types.ListResourcesResult:
        return await _resources_list(caller_for(ctx))

    async def list_resource_templates(ctx: ServerRequestContext, params: Any) -> types.ListResourceTemplatesResult:
        return _resource_templates()

    async def read_resource(ctx: ServerRequestContext, params: types.ReadResourceRequestParams) -> Any:
        return await _resource_read(str(params.uri), caller=caller_for(ctx))

    return Server(
        SERVER_NAME,
        title="Knowledge base",
        version="1.0.0",
        instructions=INSTRUCTIONS,
        on_list_tools=list_tools,
        on_call_tool=call_tool,
        on_list_resources=list_resources,
        on_list_resource_templates=list_resource_templates,
        on_read_resource=read_resource,
    )


# --- Tools ---------------------------------------------------------------------------------------


async def _tool_call(
    ctx: ServerRequestContext, params: types.CallToolRequestParams, *, caller: Caller
) -> types.CallToolResult:
    """``tools/call``: the tool's result as text and structured content, or an error result (module
    docstring); an unknown tool is a JSON-RPC ``-32602``."""
    spec = TOOLS.get(params.name)
    if spec is None:
        raise MCPError(
            code=types.INVALID_PARAMS,
            message=f"Unknown tool {params.name[:100]!r}; the tools are {', '.join(TOOLS)}.",
        )
    try:
        arguments = spec.arguments.model_validate(params.arguments or {})
    except ValidationError as exc:
        return _error_result("invalid_arguments", f"Invalid arguments for {spec.name}: {_describe(exc)}.")
    extra: dict[str, Any] = {}
    if spec.name == "ask" and progress_token_from_params(ctx.params) is not None:
        extra["on_event"] = _progress_reporter(ctx, caller)
    try:
        data = await caller.call(partial(spec.run, arguments=arguments, **extra))
    except ApplicationError as exc:
        return _error_result(exc.code, exc.message)
    except Exception:
        logger.exception("MCP tool %s failed", spec.name)
        return _error_result("internal_error", "The knowledge base could not run this tool; the error was logged.")
    return types.CallToolResult(
        content=[types.TextContent(type="text", text=json.dumps(data, ensure_ascii=False, default=str))],
        structured_content=data,
    )


def _progress_reporter(ctx: ServerRequestContext, caller: Caller) -> Callable[[str, dict], None]:
    """An ``on_event`` for ``ask`` that sends a progress notification (1, 2, ...) per finished step."""
    steps = itertools.count(1)

    def on_event(event: str, data: dict) -> None:
        if event == "step":
            caller.progress(ctx, next(steps), f"{data.get('stage', 'step')} done")

    return on_event


# --- Resources -----------------------------------------------------------------------------------


async def _resources_list(caller: Caller) -> types.ListResourcesResult:
    """``resources/list``: a resource per source the member may see."""
    rows = await _resource_call(caller, source_rows, uri=None)
    return types.ListResourcesResult(
        resources=[
            types.Resource(
                uri=row["uri"],
                name=row["name"],
                title=f"Source {row['name']}",
                description=f"A {row['kind']} source with {row['documents']} documents you may see.",
                mime_type="application/json",
            )
            for row in rows
        ]
    )


def _resource_templates() -> types.ListResourceTemplatesResult:
    """``resources/templates/list``: ``kb://sources/{source_id}`` and ``kb://documents/{document_id}``."""
    return types.ListResourceTemplatesResult(
        resource_templates=[
            types.ResourceTemplate(
                uri_template="kb://sources/{source_id}",
                name="source",
                title="A source",
                description="A source with its counts and its newest documents (id, title, uri, version).",
                mime_type="application/json",
            ),
            types.ResourceTemplate(
                uri_template="kb://documents/{document_id}",
                name="document",
                title="A document",
                description=f"A document's current text (the first {FETCH_MAX_CHARS} characters) and versions.",
                mime_type="application/json",
            ),
        ]
    )


async def _resource_read(uri: str, *, caller: Caller) -> types.ReadResourceResult:
    """``resources/read`` of ``uri``: a source or a document as JSON; an unknown form of URI is a
    JSON-RPC ``-32002``."""
    match = _RESOURCE.match(uri)
    if match is None:
        raise MCPError(
            code=RESOURCE_NOT_FOUND,
            message=f"Unknown resource {uri[:200]!r}: use kb://sources/<id> or kb://documents/<id>.",
            data={"uri": uri[:200]},
        )
    kind, number = match.group(1), int(match.group(2))
    if kind == "sources":
        work = partial(_source_resource, source_id=number)
    else:
        arguments = FetchArguments(document_id=number, max_chars=FETCH_MAX_CHARS)
        work = partial(fetch_run, arguments=arguments)
    data = await _resource_call(caller, work, uri=uri)
    return types.ReadResourceResult(
        contents=[
            types.TextResourceContents(
                uri=uri, mime_type="application/json", text=json.dumps(data, ensure_ascii=False, default=str)
            )
        ]
    )


async def _resource_call(caller: Caller, work: Callable[[], T], *, uri: str | None) -> T:
    """``caller.call(work)`` with the domain's errors as JSON-RPC errors (a resource read has no
    error result): ``NotFound`` → ``-32002``, others → ``-32602`` with the message."""
    try:
        return await caller.call(work)
    except NotFound as exc:
        raise MCPError(code=RESOURCE_NOT_FOUND, message=exc.message, data={"uri": uri}) from exc
    except ApplicationError as exc:
        raise MCPError(
            code=types.INVALID_PARAMS, message=f"{exc.code}: {exc.message}", data={"code": exc.code}
        ) from exc


def _source_resource(*, membership: Membership, source_id: int) -> dict:
    """A source as its resource shows it: its row of ``list_sources`` and its newest documents."""
    source, documents = source_with_documents(
        tenant=membership.tenant, source_id=source_id, user=membership.user, limit=SOURCE_DOCUMENTS_LISTED
    )
    return {
        **source_row(source),
        "documents_listed": [
            {
                "document_id": document.pk,
                "document": document.external_id,
                "title": document.title,
                "uri": document.uri,
                "resource": document_uri(document.pk),
                "current_version": document.current_version,
                "updated_at": document.updated_at.isoformat(),
            }
            for document in documents
        ],
    }
