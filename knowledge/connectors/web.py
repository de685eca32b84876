"""The web connector: the pages of a web site, from its sitemap or by following its links.

``source.location`` is a start page or a sitemap. The pages read are those on the location's
scheme and host, under its folder (start ``https://h/docs/index.html`` or
``https://h/docs/sitemap.xml``: prefix ``/docs/``), whose URL path the source's ``include`` and
``exclude`` globs select (``knowledge.connectors.base.path_selected``), at most
``source.page_limit`` of them per sync. A sync that reaches the limit keeps the known pages it did
not request as the last sync left them (it cannot tell whether they are gone): a page is deleted
only when the site says so (404, 410, left out of the sitemap or no longer linked within the limit).

Discovery (``knowledge.connectors.web_discovery``)
    A location ending in ``.xml`` or ``.xml.gz``, or one answering with an XML sitemap (``urlset``,
    or a ``sitemapindex`` whose sitemaps are read one level deep; gzipped or not), lists the pages.
    Otherwise the connector crawls breadth-first from the start page, following ``<a href>`` links
    (fragments dropped) that stay under the prefix. When crawling, an excluded page is never
    requested; a page outside ``include`` is requested only to follow its links, and is not stored.
    Links to files that are plainly not pages (images, archives, PDFs...) are not followed.

Politeness
    ``robots.txt`` (read once per sync; missing = everything allowed; 401/403 = nothing allowed)
    is obeyed for the user agent ``KnowledgeBaseBot/1.0``; its ``Crawl-delay`` wins when longer
    than ``source.crawl_delay_s``, the pause between the end of one request and the start of the
    next. A page's ``<meta name="robots">`` is obeyed too: ``noindex``, the page is not stored
    (its document is marked deleted); ``nofollow``, its links are not followed. Requests time
    out after ``TIMEOUT_S`` seconds; redirects are followed (at most ``MAX_REDIRECTS``) only on
    the same scheme and host; bodies past ``KB_WEB_MAX_PAGE_MB`` are refused, counted once
    decompressed (``Content-Encoding``: ``core.outbound.body_read``; a gzipped sitemap file too).

The tenant boundary
    Every connection (pages, sitemaps, ``robots.txt``, each redirect hop) goes through
    ``core.outbound``: public addresses only, unless the operator opened a range
    (``KB_FETCH_ALLOWED_NETWORKS``), and the socket opens to the address that was checked. A
    refused address fails with "address not allowed"; a page that cannot be fetched (refused,
    reset, silent, no such host) with "could not fetch", so a sync never tells whether a port is
    open. The operator's limits apply to every sync, also to sources saved before they were set:
    at most ``KB_WEB_MAX_PAGES`` pages and at least ``KB_WEB_MIN_CRAWL_DELAY_S`` between requests.

Changes
    A page's key and document id are its URL (after redirects); its fingerprint is
    ``etag:<ETag>`` and/or ``lm:<Last-Modified>``, else ``sha256:<hash of the body>``. With a
    sitemap, a known page is requested with ``If-None-Match`` / ``If-Modified-Since``, so an
    unchanged page costs one request answered 304 and nothing else. When crawling, every page is
    requested without conditions, because a 304 would hide the links the crawl needs; a page
    whose fingerprint equals the known one is still yielded as unchanged (its links are followed,
    its text is neither extracted nor embedded again).

Reading (``knowledge.connectors.web_reading``)
    The main text comes from trafilatura as Markdown (headings become sections, tables are
    kept), with the page's title and publication date (``published_at``, midnight UTC); when
    trafilatura finds nothing, the project's HTML reader reads the whole page. Only HTML
    (``text/html``, ``application/xhtml+xml``) is read; other content types are passed over.

Failures
    A page answering 404 or 410, redirecting off the host, or not HTML is not yielded (the sync
    marks its document deleted). A page answering another error status, or that could not be
    fetched, fails alone (its document keeps its last good state). When the start page,
    the sitemap (or one it points to) or ``robots.txt`` cannot be fetched, or ``robots.txt``
    forbids the start URL, ``SourceUnreachable`` says why and the sync changes nothing.
"""

from __future__ import annotations

import hashlib
import posixpath
import time
from collections import deque
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from urllib.parse import urljoin, urlsplit
from urllib.robotparser import RobotFileParser

import httpx2 as httpx
from django.conf import settings

from core.errors import InvalidInput
from core.outbound import (
    FETCH_FAILED,
    NOT_ALLOWED,
    AddressNotAllowed,
    FetchLimitExceeded,
    body_read,
    guarded_http_transport,
)
from knowledge.connectors.base import FileConnector, Item, SourceUnreachable, path_selected
from knowledge.connectors.web_discovery import (
    BOT_NAME,
    max_bytes,
    page_links,
    page_noindex,
    sitemap_parse,
    url_normalize,
)
from knowledge.connectors.web_reading import page_extract, page_read
from knowledge.models import Source

# Names callers import from here: discovery (``web_discovery``) and reading (``web_reading``) too.
__all__ = ["BOT_NAME", "USER_AGENT", "WebConnector", "max_bytes", "page_extract", "page_read", "url_normalize"]

USER_AGENT = f"{BOT_NAME}/1.0"
TIMEOUT_S = 20.0
MAX_REDIRECTS = 5
MAX_SITEMAPS = 50  # sitemaps read from one sitemap index
MAX_URL_LENGTH = 1000  # a document id has at most 1,000 characters

HTML_TYPES = ("text/html", "application/xhtml+xml")
GZIP_TYPES = ("application/gzip", "application/x-gzip")  # sitemap.xml.gz
NOT_PAGES = (
    ".7z .avi .bmp .css .csv .doc .docx .epub .exe .gif .gz .ico .jpeg .jpg .js .json .mov .mp3 .mp4 .odp .ods "
    ".odt .pdf .png .ppt .pptx .rar .svg .tar .tgz .wav .webm .webp .woff .woff2 .xls .xlsx .xml .zip"
).split()


@dataclass
class _Page:
    """What one GET gave: the final ``url`` (after redirects) and ``status``, or why it failed."""

    url: str
    status: int = 0
    headers: httpx.Headers = field(default_factory=httpx.Headers)
    body: bytes = b""
    error: str = ""  # could not be fetched (timeout, connection, too large, too many redirects)
    offsite: bool = False  # redirected off the scheme and host

    @property
    def content_type(self) -> str:
        return self.headers.get("content-type", "").split(";")[0].strip().lower()

    @property
    def is_html(self) -> bool:
        return not self.content_type or self.content_type in HTML_TYPES

    def fingerprint(self) -> str:
        """``etag:<ETag>`` and/or ``lm:<Last-Modified>``, else ``sha256:<body hash>``; ≤ 300 characters."""
        etag, modified = self.headers.get("etag", ""), self.headers.get("last-modified", "")
        parts = [f"etag:{etag}"] if etag else []
        if modified:
            parts.append(f"lm:{modified}")
        if not parts:
            return f"sha256:{hashlib.sha256(self.body).hexdigest()}"
        return " ".join(parts)[:300]


def _validators(fingerprint: str) -> dict[str, str]:
    """The conditional request headers a stored fingerprint allows (none for a body hash)."""
    headers = {}
    etag, _, modified = fingerprint.partition(" lm:")
    if fingerprint.startswith("lm:"):
        etag, modified = "", fingerprint[3:]
    if etag.startswith("etag:"):
        headers["If-None-Match"] = etag[5:]
    if modified:
        headers["If-Modified-Since"] = modified
    return headers


class WebConnector(FileConnector):
    """Reads the web site at ``source.location`` (module docstring).

    ``sleep`` (seconds -> None) makes the pauses between requests, ``transport`` replaces the
    network (httpx transports; the default is ``core.outbound``'s guarded one); both are for tests.
    """

    kind = "web"

    def __init__(
        self,
        source: Source,
        *,
        sleep: Callable[[float], None] | None = None,
        transport: httpx.BaseTransport | None = None,
    ):
        self.source = source
        self.sleep = sleep or time.sleep
        self.transport = transport
        self.start = url_normalize(source.location)
        parts = urlsplit(self.start)
        self.origin = f"{parts.scheme}://{parts.netloc}"
        self.prefix = posixpath.dirname(parts.path).rstrip("/") + "/"
        self.delay = max(float(source.crawl_delay_s or 0), settings.KB_WEB_MIN_CRAWL_DELAY_S)
        self.page_limit = min(source.page_limit, settings.KB_WEB_MAX_PAGES)
        self.max_bytes = max_bytes()
        self.robots: RobotFileParser | None = None
        self._client: httpx.Client | None = None
        self._requested = False
        self._pages_requested = 0

    # -- which URLs ------------------------------------------------------------------------------

    def _on_site(self, url: str) -> bool:
        """Whether ``url`` (normalized) is on the start URL's scheme and host, under its folder."""
        return url.startswith(self.origin + "/") and urlsplit(url).path.startswith(self.prefix)

    def _selected(self, url: str) -> bool:
        return path_selected(urlsplit(url).path, self.source.include, self.source.exclude)

    def _allowed(self, url: str) -> bool:
        return self.robots is None or self.robots.can_fetch(USER_AGENT, url)

    # -- HTTP ------------------------------------------------------------------------------------

    def _get(self, url: str, headers: Mapping[str, str] | None = None) -> _Page:
        """GET ``url`` after the politeness pause, following redirects on the same scheme and host."""
        assert self._client is not None
        for _ in range(MAX_REDIRECTS + 1):
            if self._requested and self.delay > 0:
                self.sleep(self.delay)
            self._requested = True
            try:
                with self._client.stream("GET", url, headers=dict(headers or {})) as response:
                    if response.is_redirect and response.headers.get("location"):
                        target = url_normalize(urljoin(url, response.headers["location"]))
                        if not target.startswith(self.origin + "/") or not self._allowed(target):
                            return _Page(url, response.status_code, response.headers, offsite=True)
                        url = target
                        continue
                    body = b""
                    if response.status_code == 200 and self._wanted(response.headers):
                        body = body_read(response, max_bytes=self.max_bytes, what=url)  # counted decoded
                    return _Page(url, response.status_code, response.headers, body)
            except FetchLimitExceeded as exc:
                return _Page(url, error=exc.message)
            except AddressNotAllowed:
                return _Page(url, error=f"{url}: {NOT_ALLOWED}")
            except (httpx.HTTPError, httpx.InvalidURL, UnicodeError, OSError):
                # Refused, reset, silent or unknown host alike: a sync never tells whether a port is open.
                return _Page(url, error=f"{url}: {FETCH_FAILED}")
        return _Page(url, error=f"{url}: more than {MAX_REDIRECTS} redirects")

    @staticmethod
    def _wanted(headers: httpx.Headers) -> bool:
        """Whether a 200's body is worth downloading: HTML, XML or gzip (sitemaps), plain text (robots.txt)."""
        kind = headers.get("content-type", "").split(";")[0].strip().lower()
        return not kind or kind in HTML_TYPES or "xml" in kind or kind == "text/plain" or kind in GZIP_TYPES

    def _get_or_unreachable(self, url: str, what: str) -> _Page:
        """GET a page the whole sync depends on; ``SourceUnreachable`` unless it answers 200."""
        page = self._get(url)
        if page.error:
            raise SourceUnreachable(f"{page.error}.")
        if page.offsite:
            raise SourceUnreachable(f"{url}: {what} redirects off {self.origin}.")
        if page.status != 200:
            raise SourceUnreachable(f"{url}: {what} answered {page.status}.")
        return page

    def _robots_read(self) -> None:
        """Read ``robots.txt`` once; a missing one allows everything, 401/403 forbid everything."""
        url = f"{self.origin}/robots.txt"
        page = self._get(url)
        robots = RobotFileParser(url)
        if page.error:
            raise SourceUnreachable(f"{page.error}.")
        if page.status in (401, 403):
            robots.disallow_all = True
        elif page.status >= 500:
            raise SourceUnreachable(f"{url} answered {page.status}; the site is not read without its robots.txt.")
        elif page.status == 200 and not page.offsite:
            robots.parse(page.body.decode("utf-8", "replace").splitlines())
        else:
            robots.allow_all = True
        self.robots = robots
        crawl_delay = robots.crawl_delay(USER_AGENT)
        if crawl_delay is not None and float(crawl_delay) > self.delay:
            self.delay = float(crawl_delay)

    # -- items -----------------------------------------------------------------------------------

    def items(self, known: Mapping[str, str]) -> Iterator[Item]:
        """Yield an ``Item`` per page of the site (see ``knowledge.connectors.base``).

        ``SourceUnreachable`` when the start page, the sitemap or ``robots.txt`` cannot be read,
        or ``robots.txt`` forbids the start URL.
        """
        with self._session():
            yield from self._items(known)

    def reach(self) -> str:
        """``robots.txt`` read and the start page (or sitemap) answering 200 through the guarded
        session, as a sync starts (``SourceUnreachable`` as ``items`` says); no other page is read."""
        with self._session():
            self._robots_read()
            if not self._allowed(self.start):
                raise SourceUnreachable(f"{self.origin}/robots.txt forbids {USER_AGENT} to read {self.start}.")
            sitemap = urlsplit(self.start).path.lower().endswith((".xml", ".xml.gz"))
            page = self._get_or_unreachable(self.start, "the sitemap" if sitemap else "the start page")
        return f"{self.start} answered {page.status} ({page.content_type or 'no content type'})"

    @contextmanager
    def _session(self) -> Iterator[None]:
        """The HTTP client of one walk (``self._client``): the guarded transport unless a test
        gives one, no redirects followed by httpx, no proxy from the environment."""
        with httpx.Client(
            timeout=TIMEOUT_S,
            follow_redirects=False,
            headers={"User-Agent": USER_AGENT},
            transport=self.transport or guarded_http_transport(),
            trust_env=False,
        ) as client:
            self._client = client
            self._requested = False
            self._pages_requested = 0
            try:
                yield
            finally:
                self._client = None

    def _items(self, known: Mapping[str, str]) -> Iterator[Item]:
        self._robots_read()
        if not self._allowed(self.start):
            raise SourceUnreachable(f"{self.origin}/robots.txt forbids {USER_AGENT} to read {self.start}.")
        if urlsplit(self.start).path.lower().endswith((".xml", ".xml.gz")):
            start = self._get_or_unreachable(self.start, "the sitemap")
            urls = self._sitemap_urls(start)
            if urls is None:
                raise SourceUnreachable(f"{self.start}: not an XML sitemap (urlset or sitemapindex).")
            yield from self._from_sitemap(urls, known)
            return
        start = self._get_or_unreachable(self.start, "the start page")
        if start.is_html:
            yield from self._crawl(start, known)
            return
        urls = self._sitemap_urls(start) if "xml" in start.content_type or start.content_type in GZIP_TYPES else None
        if urls is None:
            raise SourceUnreachable(f"{self.start}: neither a web page nor an XML sitemap ({start.content_type}).")
        yield from self._from_sitemap(urls, known)

    def _sitemap_urls(self, page: _Page) -> list[str] | None:
        """The page URLs a sitemap lists (an index's sitemaps read one level deep), or None if
        ``page`` is no sitemap; ``SourceUnreachable`` when one cannot be read or unpacks past the cap."""
        kind, locations = sitemap_parse(page.body, url=page.url)
        if kind is None:
            return None
        if kind == "urlset":
            return locations
        urls: list[str] = []
        for location in locations[:MAX_SITEMAPS]:
            child_url = url_normalize(urljoin(page.url, location))
            if not child_url.startswith(self.origin + "/") or not self._allowed(child_url):
                continue
            child = self._get_or_unreachable(child_url, "a sitemap of the sitemap index")
            child_kind, child_locations = sitemap_parse(child.body, url=child.url)
            if child_kind == "urlset":
                urls.extend(child_locations)
        return urls

    def _from_sitemap(self, locations: list[str], known: Mapping[str, str]) -> Iterator[Item]:
        """One conditional GET per selected page of the sitemap, at most ``page_limit``."""
        urls: dict[str, None] = {}  # ordered, without repeats
        for location in locations:
            url = url_normalize(urljoin(self.start, location))
            if url not in urls and self._on_site(url) and self._selected(url) and self._allowed(url):
                urls[url] = None
        seen: set[str] = set()
        listed = list(urls)
        for url in listed[: self.page_limit]:
            page = self._get(url, _validators(known.get(url, "")))
            if page.url in seen:
                continue
            seen.add(page.url)
            item = self._item(page, known, requested=url)
            if item is not None:
                yield item
        # Past the limit: not asked for, but still listed, so not gone; kept as the last sync left them.
        for url in listed[self.page_limit :]:
            if url in known and url not in seen:
                seen.add(url)
                yield Item(url, known[url], unchanged=True)

    def _crawl(self, start: _Page, known: Mapping[str, str]) -> Iterator[Item]:
        """Breadth-first from the start page, at most ``page_limit`` pages requested.

        When the limit leaves pages unrequested, the known pages not requested are kept as the last
        sync left them (yielded unchanged): the crawl cannot tell whether they are gone.
        """
        queue: deque[str] = deque()
        queued = {self.start, start.url}
        asked = {self.start, start.url}  # requested URLs and where they led
        page: _Page | None = start
        requested = 1
        while page is not None:
            if page.status == 200 and page.is_html and not page.offsite and self._on_site(page.url):
                for link in page_links(page.body, url=page.url):
                    if link not in queued and self._followed(link):
                        queued.add(link)
                        queue.append(link)
            item = self._item(page, known, requested=page.url)
            if item is not None:
                yield item
            page = None
            while queue and requested < self.page_limit:
                url = queue.popleft()
                page = self._get(url)
                requested += 1
                asked.update((url, page.url))
                if page.url != url:  # redirected: read each final URL once
                    if page.url in queued and not page.error:
                        page = None
                        continue
                    queued.add(page.url)
                break
        if queue:
            for url, fingerprint in known.items():
                if url not in asked and self._on_site(url) and self._selected(url) and self._allowed(url):
                    yield Item(url, fingerprint, unchanged=True)

    def _followed(self, url: str) -> bool:
        """Whether the crawl requests ``url``: under the prefix, allowed, not excluded, likely a page."""
        path = urlsplit(url).path
        if not self._on_site(url) or not self._allowed(url):
            return False
        if self.source.exclude and not path_selected(path, [], self.source.exclude):
            return False
        return posixpath.splitext(path)[1].lower() not in NOT_PAGES

    def _item(self, page: _Page, known: Mapping[str, str], *, requested: str) -> Item | None:
        """The item of a fetched page; None when the page is gone, off the site, not HTML or noindex,
        and when it failed but would not have been stored (a page requested only for its links)."""
        if page.error:
            if not self._selected(requested):
                return None
            return Item(requested, known.get(requested, ""), error=page.error)
        if page.offsite or page.status in (404, 410):
            return None
        if page.status == 304:
            if page.url not in known:  # 304 to a request without conditions
                return Item(page.url, error=f"{page.url}: the server answered 304 to a request without conditions")
            return Item(page.url, known[page.url], unchanged=True)
        if page.status != 200:
            if not (self._on_site(page.url) and self._selected(page.url)):
                return None
            return Item(page.url, known.get(page.url, ""), error=f"{page.url}: the server answered {page.status}")
        if not page.is_html or not self._on_site(page.url) or not self._selected(page.url):
            return None
        if len(page.url) > MAX_URL_LENGTH:
            return Item(page.url, error=f"{page.url[:200]}...: a URL longer than {MAX_URL_LENGTH} characters")
        fingerprint = page.fingerprint()
        if known.get(page.url) == fingerprint:
            return Item(page.url, fingerprint, unchanged=True)
        if page_noindex(page.body):  # an unchanged page kept its (indexable) state; a changed one may ask out
            return None
        try:
            document = page_read(page.body, url=page.url, encoding=_charset(page.headers))
        except InvalidInput as exc:
            return Item(page.url, fingerprint, error=exc.message)
        return Item(page.url, fingerprint, documents=[document])


def _charset(headers: httpx.Headers) -> str | None:
    for part in headers.get("content-type", "").split(";")[1:]:
        key, _, value = part.partition("=")
        if key.strip().lower() == "charset" and value.strip():
            charset = value.strip().strip('"')
            try:
                "".encode(charset)
            except LookupError:
                return None
            return charset
    return None
