"""``/mcp``: the MCP Streamable HTTP endpoint, served by the same WSGI server as the REST API.

A POST carries one JSON-RPC message. The view authenticates its membership token, binds the
request's tenant exactly as the REST API does (``core.memberships.membership_for_request``: the
row-level-security scope, an ``X-Tenant`` naming another tenant refused), counts it against the
REST API's per-user rate, and hands it to the SDK through ``mcp_server.bridge``. The server is
stateless (no ``Mcp-Session-Id``): a GET (the optional server-to-client stream), a DELETE (the
end of a session) and any other method are answered 405, as the specification allows, so no client
holds a server thread open waiting for messages that never come. CSRF-exempt (a bearer token, no cookie
is read or set).

Refusals are JSON-RPC errors in the body (id null) with the HTTP status: 401 (no or bad token,
with ``WWW-Authenticate: Bearer``), 403 (``X-Tenant`` naming another tenant), 413 (a body over
``MAX_BODY_BYTES``), 429 (over the rate, with ``Retry-After``).
"""

from __future__ import annotations

import math

from django.conf import settings
from django.http import HttpResponse
from django.utils.decorators import method_decorator
from django.views import View
from django.views.decorators.csrf import csrf_exempt
from mcp_types import INVALID_REQUEST

from core.errors import ApplicationError
from core.memberships import membership_for_request
from mcp_server.auth import NotAuthenticated, Throttled, key_from_header, rate_limit_check, token_for_key
from mcp_server.bridge import Exchange, asgi_scope, jsonrpc_error

MAX_BODY_BYTES = 1024 * 1024  # one JSON-RPC message; a question is at most 2,000 characters


def _refusal(exc: ApplicationError) -> HttpResponse:
    response = jsonrpc_error(exc.message, status=exc.status, code=INVALID_REQUEST, data={"code": exc.code})
    if isinstance(exc, NotAuthenticated):
        response["WWW-Authenticate"] = 'Bearer realm="mcp"'
    if isinstance(exc, Throttled) and exc.wait is not None:
        response["Retry-After"] = str(max(1, math.ceil(exc.wait)))
    return response


@method_decorator(csrf_exempt, name="dispatch")
class McpView(View):
    """The MCP endpoint (POST only; see the module's docstring)."""

    http_method_names = ["post"]

    def post(self, request):
        """One JSON-RPC message (at most ``MAX_BODY_BYTES``) → the SDK's answer (JSON, or an event
        stream with ``KB_MCP_SSE``); the refusals of the module's docstring before the SDK sees it."""
        try:
            token = token_for_key(key_from_header(request.headers.get("Authorization")))
            # As the REST API's authentication leaves them; then its one tenant resolver, which
            # binds the request's row-level-security scope (and refuses an X-Tenant of another).
            request.user, request.auth = token.membership.user, token
            membership = membership_for_request(request)
            rate_limit_check(request)
        except ApplicationError as exc:
            return _refusal(exc)
        length = request.META.get("CONTENT_LENGTH") or "0"
        if not length.isdigit() or int(length) > MAX_BODY_BYTES:
            return jsonrpc_error(
                f"The request body is over {MAX_BODY_BYTES} bytes or has no valid Content-Length.",
                status=413,
                code=INVALID_REQUEST,
                data={"code": "payload_too_large"},
            )
        body = request.read(MAX_BODY_BYTES + 1)
        streamed = settings.KB_MCP_SSE
        exchange = Exchange(membership=membership, scope=asgi_scope(request), body=body, streamed=streamed)
        return exchange.respond()

    def http_method_not_allowed(self, request, *args, **kwargs):
        """Anything but POST: 405 with a JSON-RPC error body and ``Allow: POST``."""
        return self._not_allowed()

    @staticmethod
    def _not_allowed() -> HttpResponse:
        response = jsonrpc_error(
            "This MCP server is stateless: POST each JSON-RPC message to this URL (no event stream, no session).",
            status=405,
            code=INVALID_REQUEST,
        )
        response["Allow"] = "POST"
        return response
