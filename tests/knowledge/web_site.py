"""A small web site on 127.0.0.1 for the web connector's tests and benchmarks.

``site_serve(pages)`` serves ``pages`` (path -> HTML, or (content type, body)) from a thread;
the test can change ``site.pages`` and ``site.status`` between syncs and read ``site.hits``.
Pages get an ETag (a hash of their body) and answer 304 to a matching ``If-None-Match``, unless
``etags=False``. ``site_pages_generate(n)`` makes an n-page site with a sitemap::

    with site_serve(site_pages_generate(200)) as site:
        source_create(tenant=t, name="docs", kind="web", location=site.url("/docs/sitemap.xml"))
"""

from __future__ import annotations

import hashlib
import threading
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class Site:
    """The site being served: its ``pages``, ``status`` overrides, ``redirects`` and ``delays``, the ``hits``
    per path, ``answers``: (path, status) of every request in order, and the ``user_agents`` seen."""

    def __init__(self, pages: dict, *, etags: bool = True):
        self.pages = dict(pages)
        self.status: dict[str, int] = {}  # path -> status to answer instead of the page
        self.redirects: dict[str, str] = {}  # path -> where a 301 sends it
        self.delays: dict[str, float] = {}  # path -> seconds to wait before answering
        self.etags = etags
        self.hits: Counter[str] = Counter()
        self.user_agents: set[str] = set()
        self.answers: list[tuple[str, int]] = []
        self.server: ThreadingHTTPServer | None = None
        self.lock = threading.Lock()

    @property
    def origin(self) -> str:
        host, port = self.server.server_address[:2]
        return f"http://{host}:{port}"

    def url(self, path: str) -> str:
        return self.origin + path

    def fetched(self, path: str) -> int:
        """How many requests asked for ``path`` (its query included, when it has one)."""
        return self.hits[path]

    def answered(self, status: int) -> int:
        """How many requests got ``status``."""
        return sum(1 for _, s in self.answers if s == status)

    def reset_counts(self) -> None:
        self.hits.clear()
        self.answers.clear()


def _handler(site: Site):
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format, *args):  # quiet
            pass

        def _answer(self, status: int, body: bytes = b"", headers: dict | None = None) -> None:
            with site.lock:
                site.answers.append((self.path, status))
            self.send_response(status)
            for name, value in (headers or {}).items():
                self.send_header(name, value)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(body)

        def do_GET(self):
            with site.lock:
                site.hits[self.path] += 1
                site.user_agents.add(self.headers.get("User-Agent", ""))
            if self.path in site.delays:
                time.sleep(site.delays[self.path])
            if self.path in site.redirects:
                self._answer(301, b"", {"Location": site.redirects[self.path]})
                return
            if self.path in site.status:
                self._answer(site.status[self.path], b"Sorry", {"Content-Type": "text/plain"})
                return
            page = site.pages.get(self.path)
            if page is None:
                self._answer(404, b"Not found", {"Content-Type": "text/plain"})
                return
            content_type, body = ("text/html; charset=utf-8", page) if isinstance(page, str) else page
            body = body.encode() if isinstance(body, str) else body
            headers = {"Content-Type": content_type}
            if site.etags:
                etag = f'"{hashlib.sha1(body).hexdigest()[:16]}"'
                headers["ETag"] = etag
                if self.headers.get("If-None-Match") == etag:
                    self._answer(304, b"", {"ETag": etag})
                    return
            self._answer(200, body, headers)

    return Handler


@contextmanager
def site_serve(pages: dict, *, etags: bool = True) -> Iterator[Site]:
    """Serve ``pages`` on 127.0.0.1 (a free port) while the block runs; yields the ``Site``."""
    site = Site(pages, etags=etags)
    site.server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(site))
    site.server.daemon_threads = True
    thread = threading.Thread(target=site.server.serve_forever, daemon=True)
    thread.start()
    try:
        yield site
    finally:
        site.server.shutdown()
        site.server.server_close()
        thread.join(5)


def page_html(title: str, text: str, links: list[str] = (), *, head: str = "") -> str:
    """A small HTML page: ``<title>``, an ``<h1>``, a paragraph and a list of links."""
    anchors = "".join(f'<li><a href="{href}">{href}</a></li>' for href in links)
    return (
        f"<!doctype html><html><head><title>{title}</title>{head}</head><body>"
        f"<main><h1>{title}</h1><p>{text}</p><ul>{anchors}</ul></main></body></html>"
    )


def sitemap_xml(urls: list[str]) -> tuple[str, str]:
    """A sitemap (content type, body) listing ``urls``."""
    entries = "".join(f"<url><loc>{url}</loc></url>" for url in urls)
    return (
        "application/xml",
        f'<?xml version="1.0" encoding="UTF-8"?>'
        f'<urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">{entries}</urlset>',
    )


_TOPICS = ("harbours", "orchards", "glaciers", "lighthouses", "bakeries", "observatories", "canals", "vineyards")


def site_pages_generate(n: int, *, prefix: str = "/docs/", origin: str = "") -> dict:
    """``n`` short pages ``{prefix}page-{i}.html`` (page i links to pages 2i+1 and 2i+2, so a crawl
    from page 0 reaches every page) and ``{prefix}sitemap.xml`` listing them all.

    Sitemap URLs must be absolute: pass the site's ``origin``, or leave it empty and call
    ``sitemap_fill(site)`` once the site is served."""
    pages: dict = {}
    for i in range(n):
        topic = _TOPICS[i % len(_TOPICS)]
        links = [f"page-{j}.html" for j in (2 * i + 1, 2 * i + 2) if j < n]
        pages[f"{prefix}page-{i}.html"] = page_html(
            f"Page {i} about {topic}",
            f"Page number {i} is a short note about {topic}, number {i * 7 % 101} of the series.",
            links,
        )
    pages[f"{prefix}sitemap.xml"] = sitemap_xml([f"{origin}{prefix}page-{i}.html" for i in range(n)])
    return pages


def sitemap_fill(site: Site, *, prefix: str = "/docs/") -> None:
    """Rewrite ``{prefix}sitemap.xml`` to list every ``.html`` page under ``prefix`` with absolute URLs."""
    paths = sorted(
        (p for p in site.pages if p.startswith(prefix) and p.endswith(".html")),
        key=lambda p: (len(p), p),
    )
    site.pages[f"{prefix}sitemap.xml"] = sitemap_xml([site.url(p) for p in paths])
