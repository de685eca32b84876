"""The base of the services' local stand-ins: an HTTP server on 127.0.0.1 that a connector's real
client library talks to, written from the vendor's public API reference.

A stand-in subclass keeps the service's state (channels, pages, files...) in plain Python and
answers routes with ``route(method, pattern)``-decorated methods; the base adds what every test
needs:

* ``token``: the one credential it accepts (``Authorization: Bearer``, ``Basic``, or the kind's
  own header, by the subclass's ``authorized``); ``revoke()`` makes every request answer 401
  (or the service's own "invalid_auth" shape, by the subclass's ``unauthorized``);
* ``fail_next(status, retry_after=1, count=1)``: the next ``count`` requests answer ``status``
  (429 with ``Retry-After``, a 500...) before the real answer;
* ``requests``: ``(method, path)`` of every request, in order; ``count(prefix)`` counts those
  whose path starts with ``prefix`` (the incremental sync's "fetches only what changed").

``with SlackStandIn() as slack: slack.url`` gives the base URL (``http://127.0.0.1:PORT/``).
"""

from __future__ import annotations

import io
import json
import re
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit


def route(method: str, pattern: str):
    """Mark a stand-in method as the answer to ``method`` on paths matching ``pattern`` (a regular
    expression matched whole against the path, without the query; its groups are passed on)."""

    def mark(function):
        function.route = (method.upper(), re.compile(pattern))
        return function

    return mark


class Request:
    """One request as the stand-in's route methods see it."""

    def __init__(self, method: str, path: str, query: dict[str, list[str]], headers, body: bytes):
        self.method, self.path, self.query, self.headers, self.body = method, path, query, headers, body

    def arg(self, name: str, default=None):
        """A query (or form, or JSON body) parameter's first value."""
        if name in self.query:
            return self.query[name][0]
        form = self.form()
        if name in form:
            return form[name]
        return default

    def form(self) -> dict:
        """The body as a dict: JSON, or a form (first values)."""
        if not self.body:
            return {}
        kind = self.headers.get("Content-Type", "")
        if "json" in kind:
            try:
                data = json.loads(self.body)
            except ValueError:
                return {}
            return data if isinstance(data, dict) else {}
        return {k: v[0] for k, v in parse_qs(self.body.decode("utf-8", "replace")).items()}

    def json(self):
        return json.loads(self.body or b"null")


class StandIn:
    """A service on loopback (module docstring). Subclasses add state and ``@route`` methods."""

    token = "good-token"

    def __init__(self):
        self.requests: list[tuple[str, str]] = []
        self.revoked = False
        self._failures: list[tuple[int, float | None]] = []
        self._lock = threading.Lock()
        self._routes = [
            getattr(self, name).route + (getattr(self, name),)
            for name in dir(type(self))
            if callable(getattr(type(self), name, None)) and hasattr(getattr(type(self), name), "route")
        ]
        standin = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            disable_nagle_algorithm = True  # headers and body leave at once, not after a delayed ACK

            def _any(self):
                standin._answer(self)

            do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = _any  # noqa: N815 (http.server's names)

            def log_message(self, format, *args):  # quiet
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    # -- life --------------------------------------------------------------------------------------

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._server.shutdown()
        self._server.server_close()

    @property
    def url(self) -> str:
        """The base URL, ending in ``/``."""
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}/"

    # -- what tests change -------------------------------------------------------------------------

    def revoke(self) -> None:
        """Refuse the token from now on."""
        self.revoked = True

    def fail_next(self, status: int = 429, *, retry_after: float | None = 1, count: int = 1) -> None:
        """Answer the next ``count`` requests with ``status`` (and ``Retry-After`` when given)."""
        with self._lock:
            self._failures.extend([(status, retry_after)] * count)

    def count(self, prefix: str = "") -> int:
        """How many requests had a path starting with ``prefix``."""
        return sum(1 for _method, path in self.requests if path.startswith(prefix))

    def reset_counts(self) -> None:
        self.requests.clear()

    # -- for subclasses ----------------------------------------------------------------------------

    def authorized(self, request: Request) -> bool:
        """Whether ``request`` carries the token (default: ``Authorization: Bearer <token>``)."""
        return request.headers.get("Authorization", "") == f"Bearer {self.token}"

    def unauthorized(self, request: Request):
        """The answer to a request without a valid token: ``(status, body)``."""
        return 401, {"message": "Bad credentials"}

    def not_found(self, request: Request):
        return 404, {"message": "Not Found"}

    # -- serving -----------------------------------------------------------------------------------

    def _answer(self, handler: BaseHTTPRequestHandler) -> None:
        parts = urlsplit(handler.path)
        length = int(handler.headers.get("Content-Length") or 0)
        body = handler.rfile.read(length) if length else b""
        request = Request(handler.command, parts.path, parse_qs(parts.query), handler.headers, body)
        with self._lock:
            self.requests.append((handler.command, parts.path))
            failure = self._failures.pop(0) if self._failures else None
        if failure is not None:
            status, retry_after = failure
            headers = {"Retry-After": f"{retry_after:g}"} if retry_after is not None else {}
            self._send(handler, status, {"error": "stand-in failure"}, headers)
            return
        if self.revoked or not self.authorized(request):
            self._send(handler, *self._triple(self.unauthorized(request)))
            return
        for method, pattern, function in self._routes:
            match = pattern.fullmatch(parts.path)
            if match and method == handler.command:
                self._send(handler, *self._triple(function(request, *match.groups())))
                return
        self._send(handler, *self._triple(self.not_found(request)))

    @staticmethod
    def _triple(answer):
        if len(answer) == 2:
            return answer[0], answer[1], {}
        return answer

    @staticmethod
    def _send(handler, status: int, body, headers: dict) -> None:
        if isinstance(body, bytes):
            data, kind = body, headers.pop("Content-Type", "application/octet-stream")
        elif isinstance(body, str):
            data, kind = body.encode(), headers.pop("Content-Type", "text/plain; charset=utf-8")
        else:
            data, kind = json.dumps(body).encode(), "application/json; charset=utf-8"
        # Headers and body in one write: two small writes wait for the client's delayed ACK (40 ms
        # a request), too slow for a benchmark's thousands of pages.
        wfile, handler.wfile = handler.wfile, io.BytesIO()
        try:
            handler.send_response(status)
            handler.send_header("Content-Type", kind)
            handler.send_header("Content-Length", str(len(data)))
            for name, value in headers.items():
                handler.send_header(name, value)
            handler.end_headers()
            handler.wfile.write(data)
        finally:
            joined, handler.wfile = handler.wfile, wfile
        wfile.write(joined.getvalue())
