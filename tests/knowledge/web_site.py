"""A small web site on 127.0.0.1 (or another loopback ``host``) for the web connector's tests and benchmarks.

``WebSite(pages)`` serves ``pages``, a dict of path (with its query, if any) -> ``Response``,
``(status, body)`` or ``(status, body, headers)``, from a thread; tests change the dict between
syncs. A path that is not in it answers 404. A request whose ``If-None-Match`` equals the page's
``ETag`` (or whose ``If-Modified-Since`` equals its ``Last-Modified``) answers 304 without a body.
``hits`` counts requests per path, ``log`` lists ``(path, status)`` in order, ``connections``
counts the TCP connections accepted (a client that connects and sends nothing counts too).

``site_pages(n)`` makes ``n`` short, distinct HTML pages under ``/docs/`` with ETags, and a
sitemap listing them::

    with WebSite(site_pages(200)) as site:
        source = source_create(tenant=t, name="site", kind="web", location=site.url("/docs/sitemap.xml"),
                               crawl_delay_s=0)
"""

from __future__ import annotations

import hashlib
import random
import threading
import time
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import NamedTuple


class Response(NamedTuple):
    status: int
    body: str | bytes = b""
    headers: dict[str, str] = {}
    delay_s: float = 0.0  # wait this long before answering (timeouts)


def _response(entry) -> Response:
    return entry if isinstance(entry, Response) else Response(*entry)


class WebSite:
    """A web site serving ``pages`` (module docstring) on ``http://<host>:<port>``."""

    def __init__(self, pages: dict | None = None, *, host: str = "127.0.0.1"):
        self.pages: dict = dict(pages or {})
        self.hits: Counter[str] = Counter()
        self.log: list[tuple[str, int]] = []
        self._lock = threading.Lock()
        site = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_GET(self):  # noqa: N802 (http.server's name)
                site._answer(self)

            def log_message(self, format, *args):  # quiet
                pass

        self.host = host
        self.connections = 0

        class Server(ThreadingHTTPServer):
            def verify_request(self, request, client_address):
                with site._lock:
                    site.connections += 1
                return True

        self.server = Server((host, 0), Handler)
        self.server.daemon_threads = True
        self.port = self.server.server_address[1]
        self._thread: threading.Thread | None = None

    def url(self, path: str = "/") -> str:
        return f"http://{self.host}:{self.port}{path}"

    def start(self) -> WebSite:
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self._thread.start()
        return self

    def close(self) -> None:
        """Shut the server down: the port refuses connections from then on."""
        if self._thread is not None:
            self.server.shutdown()
            self._thread.join()
            self._thread = None
        self.server.server_close()

    def __enter__(self) -> WebSite:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.close()

    def statuses(self, path: str) -> list[int]:
        """The statuses ``path`` answered, in order."""
        return [status for p, status in self.log if p == path]

    def reset_counts(self) -> None:
        with self._lock:
            self.hits.clear()
            self.log.clear()
            self.connections = 0

    def _answer(self, handler: BaseHTTPRequestHandler) -> None:
        path = handler.path
        entry = self.pages.get(path)
        response = _response(entry) if entry is not None else Response(404, "<h1>Not found</h1>")
        if response.delay_s:
            time.sleep(response.delay_s)
        headers = {"Content-Type": "text/html; charset=utf-8", **response.headers}
        status, body = response.status, response.body
        if status == 200:
            etag, modified = headers.get("ETag"), headers.get("Last-Modified")
            if (etag and handler.headers.get("If-None-Match") == etag) or (
                modified and handler.headers.get("If-Modified-Since") == modified
            ):
                status, body = 304, b""
        data = body.encode() if isinstance(body, str) else body
        with self._lock:
            self.hits[path] += 1
            self.log.append((path, status))
        try:
            handler.send_response(status)
            for key, value in headers.items():
                if status == 304 and key.lower() == "content-type":
                    continue
                handler.send_header(key, value)
            handler.send_header("Content-Length", str(len(data)))
            handler.end_headers()
            handler.wfile.write(data)
        except (BrokenPipeError, ConnectionResetError):  # the client gave up (a timeout)
            pass


_WORDS = (
    "apple river mountain cable garden violin harbor pencil thunder meadow lantern copper saddle "
    "orbit glacier falcon tunnel velvet marble compass jasmine ledger quarry ribbon summit tide "
    "walnut ember canyon beacon cedar delta fable grove hammer island jungle kettle lagoon magnet "
    "nectar oasis pepper quartz rocket spindle timber umbra valley willow yonder zephyr"
).split()


def html_page(title: str, text: str, links: list[str] = ()) -> str:
    """A small HTML page: ``title`` as its title and heading, ``text`` as a paragraph, then ``links``."""
    anchors = "".join(f'<li><a href="{href}">{href}</a></li>' for href in links)
    return (
        f"<!doctype html><html><head><title>{title}</title></head><body><main><h1>{title}</h1>"
        f"<p>{text}</p><ul>{anchors}</ul></main></body></html>"
    )


def page(title: str, text: str, links: list[str] = (), *, etag: str | None = None) -> Response:
    """A 200 response with ``html_page`` and an ETag (the body's hash unless given)."""
    body = html_page(title, text, links)
    return Response(200, body, {"ETag": etag or f'"{hashlib.sha1(body.encode()).hexdigest()[:16]}"'})


def sitemap(urls: list[str]) -> Response:
    """A 200 ``urlset`` sitemap listing ``urls``."""
    entries = "".join(f"<url><loc>{url}</loc></url>" for url in urls)
    body = f'<?xml version="1.0" encoding="UTF-8"?><urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">{entries}</urlset>'
    return Response(200, body, {"Content-Type": "application/xml"})


def site_pages(n: int, *, folder: str = "/docs/", words: int = 40, base: str = "") -> dict:
    """``n`` distinct short pages ``{folder}page-<i>.html`` with ETags, and ``{folder}sitemap.xml``
    listing them as ``base`` + path (give ``site.url("")`` for absolute URLs; without it the paths
    are resolved against the sitemap's URL)."""
    pages: dict = {}
    for i in range(n):
        rng = random.Random(i)
        text = " ".join(rng.choice(_WORDS) for _ in range(words))
        pages[f"{folder}page-{i}.html"] = page(f"Page {i}: {' '.join(rng.sample(_WORDS, 3))}", f"Entry {i}. {text}.")
    pages[f"{folder}sitemap.xml"] = sitemap([base + path for path in pages])
    return pages
