"""The web connector: the pages of a web site, from its sitemap or by crawling from a start page.

Where the pages come from (``source.location``):

* a sitemap (the location ends in ``.xml``, or answers with an XML ``urlset`` or
  ``sitemapindex``; the sitemaps of an index are followed one level): its page URLs on the same
  scheme and host and under the sitemap's folder;
* otherwise the start page, crawled breadth first along ``<a href>`` links (fragments dropped,
  URLs normalized) that stay on its scheme and host and under its folder (start
  ``http://h/docs/index.html``: pages under ``http://h/docs/``).

``include`` and ``exclude`` globs (``path_selected``) match the URL path (``/docs/api/*``; ``*``
also matches ``/``): an excluded page is never fetched; a crawled page that no ``include`` glob
matches is fetched for its links only. A sync yields at most ``page_limit`` pages and, while
crawling, makes at most ``FETCHES_PER_PAGE`` x ``page_limit`` requests.

Politeness: robots.txt (fetched once per sync from ``scheme://host/robots.txt``; missing = all
allowed, 401/403 = nothing allowed) is obeyed for ``USER_AGENT``, and so are
``<meta name="robots">`` noindex and nofollow. Requests are ``crawl_delay_s`` apart, or
robots.txt's ``Crawl-delay`` when longer. Redirects are followed on the same host only.

Change checks: a page's key is its URL (after redirects) and its fingerprint holds its ``ETag``,
its ``Last-Modified`` and the SHA-256 of its body. A page listed by a sitemap is asked for with
``If-None-Match`` / ``If-Modified-Since``: a 304 costs one empty answer, nothing is read or
embedded. A crawl needs the links of every page, including unchanged ones, so it fetches pages
whole (no conditions); a page whose fingerprint is the one the last sync stored is still neither
extracted nor embedded. A site whose pages should cost nothing when unchanged is best synced
from its sitemap.

Reading: the main text (trafilatura, as Markdown so headings become sections; the page's
BeautifulSoup text when trafilatura finds none), its title and published date (from the page's
metadata, e.g. ``article:published_time``). A document's id and URI are the page URL.

What a sync concludes:

* a page answering 404 or 410, redirected off the host, or not HTML is not yielded: its document
  is marked deleted;
* a page answering another error (a 500, a 403, a 429), timing out or unreadable fails alone:
  ``Item(url, error="<url>: the server answered 500")``, its document keeps its last state;
* when the start page, robots.txt or a sitemap cannot be had (connection refused, unknown host,
  a timeout, an error status), ``SourceUnreachable``: nothing changes;
* when a sync ends at ``page_limit`` it cannot tell whether the known pages it did not reach
  are gone: those still in scope are kept as they were (yielded unchanged).
"""

from __future__ import annotations

import codecs
import gzip
import hashlib
import io
import logging
import re
import time
from collections import deque
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import UTC, date, datetime
from urllib.parse import urljoin, urlsplit, urlunsplit
from urllib.robotparser import RobotFileParser

import urllib3

from core.errors import InvalidInput
from knowledge.connectors.base import Item, SourceUnreachable, path_selected
from knowledge.ingestion.readers import ReadDocument, read_bytes
from knowledge.models import Source

logger = logging.getLogger(__name__)

USER_AGENT = "KnowledgeBaseBot/1.0 (+sync)"
# Seconds to connect, and to wait for each part of an answer.
TIMEOUT_S = 20.0
MAX_REDIRECTS = 5
# A larger page or sitemap fails (alone, or the whole sync for a sitemap).
MAX_BODY_BYTES = 10 * 2**20
# A crawl fetches pages that are not yielded (outside ``include``, 404s, files): at most this many
# requests per page of ``page_limit``.
FETCHES_PER_PAGE = 3
# A document's external_id has at most 1,000 characters: longer URLs are not followed.
MAX_URL_CHARS = 1000
# Fingerprint parts; an ETag longer than this is not kept (the fingerprint has at most 300 characters).
MAX_ETAG_CHARS = 150

_HTML_TYPES = ("text/html", "application/xhtml+xml")
_REDIRECTS = (301, 302, 303, 307, 308)
_GONE = (404, 410)
_DEFAULT_PORTS = {"http": 80, "https": 443}


class _FetchFailed(Exception):
    """No usable answer (connection refused, timeout, too many redirects, too large); the message names the URL."""


@dataclass
class _Answer:
    """A server's final answer to a GET. ``status`` 0: redirected off the host (to ``url``)."""

    url: str
    status: int
    content_type: str = ""
    headers: Mapping[str, str] = field(default_factory=dict)
    body: bytes = b""

    @property
    def is_html(self) -> bool:
        return self.content_type in _HTML_TYPES or (not self.content_type and self.body.lstrip()[:1] == b"<")


@dataclass(frozen=True)
class _Scope:
    """The pages a sync may read: one scheme and host, paths under one folder."""

    origin: str  # scheme://host[:port]
    prefix: str  # a path ending in "/"

    @classmethod
    def around(cls, url: str) -> _Scope:
        """The scope of a start page or sitemap: its origin and its folder."""
        parts = urlsplit(url)
        return cls(f"{parts.scheme}://{parts.netloc}", parts.path[: parts.path.rfind("/") + 1] or "/")

    def contains(self, url: str) -> bool:
        parts = urlsplit(url)
        return f"{parts.scheme}://{parts.netloc}" == self.origin and parts.path.startswith(self.prefix)


def url_normalize(url: str, base: str | None = None) -> str | None:
    """``url`` (relative to ``base``) as an absolute http(s) URL without fragment, user or default
    port, with a lowercase scheme and host and a path of at least ``/``; None for other schemes,
    malformed URLs and URLs longer than ``MAX_URL_CHARS``."""
    url = url.strip()
    try:
        parts = urlsplit(urljoin(base, url) if base else url)
        port = parts.port
    except ValueError:
        return None
    scheme = parts.scheme.lower()
    host = parts.hostname
    if scheme not in _DEFAULT_PORTS or not host:
        return None
    if ":" in host:  # IPv6
        host = f"[{host}]"
    netloc = host if port in (None, _DEFAULT_PORTS[scheme]) else f"{host}:{port}"
    normalized = urlunsplit((scheme, netloc, parts.path or "/", parts.query, ""))
    return normalized if len(normalized) <= MAX_URL_CHARS else None


def fingerprint_of(headers: Mapping[str, str], body: bytes) -> str:
    """A page's fingerprint: ``etag:<ETag>``, ``lm:<Last-Modified>`` (when the server sends them)
    and ``sha256:<hex of the body>``, one per line (at most 300 characters)."""
    parts = []
    etag = (headers.get("ETag") or "").strip()
    if etag and len(etag) <= MAX_ETAG_CHARS:
        parts.append(f"etag:{etag}")
    modified = (headers.get("Last-Modified") or "").strip()
    if modified and len(modified) <= 64:
        parts.append(f"lm:{modified}")
    parts.append(f"sha256:{hashlib.sha256(body).hexdigest()}")
    return "\n".join(parts)


def _conditions(fingerprint: str) -> dict[str, str]:
    """The conditional request headers a stored fingerprint allows (none for a body hash alone)."""
    headers = {}
    for line in fingerprint.split("\n"):
        if line.startswith("etag:"):
            headers["If-None-Match"] = line[5:]
        elif line.startswith("lm:"):
            headers["If-Modified-Since"] = line[3:]
    return headers


def _decode(body: bytes, content_type_header: str) -> str:
    """A page's text: the charset of its Content-Type, else of its ``<meta charset>``, else UTF-8."""
    if body.startswith(codecs.BOM_UTF8):
        return body[3:].decode("utf-8", errors="replace")
    match = re.search(r"charset=[\"']?([\w.:-]+)", content_type_header, re.I) or re.search(
        rb"<meta[^>]+charset=[\"']?([\w.:-]+)", body[:4096], re.I
    )
    charset = match.group(1) if match else "utf-8"
    if isinstance(charset, bytes):
        charset = charset.decode("ascii", errors="replace")
    try:
        return body.decode(charset, errors="replace")
    except LookupError:
        return body.decode("utf-8", errors="replace")


def _connect_reason(exc: Exception) -> str:
    text = str(exc)
    if "refused" in text.lower():
        return "connection refused"
    if any(s in text for s in ("Name or service not known", "NameResolution", "getaddrinfo", "nodename nor servname")):
        return "unknown host"
    if "SSL" in text:
        return "TLS error"
    return "connection failed"


def sitemap_urls(body: bytes) -> tuple[str, list[str]] | None:
    """``("urlset" | "sitemapindex", [loc, ...])`` of an XML sitemap (gzipped or not); None when
    ``body`` is not one. Entities are not resolved and nothing is fetched by the parser."""
    from lxml import etree

    if body[:2] == b"\x1f\x8b":
        try:
            body = gzip.GzipFile(fileobj=io.BytesIO(body)).read(MAX_BODY_BYTES + 1)
        except (OSError, EOFError):
            return None
        if len(body) > MAX_BODY_BYTES:
            return None
    parser = etree.XMLParser(resolve_entities=False, no_network=True)
    try:
        root = etree.fromstring(body, parser)
    except etree.XMLSyntaxError:
        return None
    if root is None or not isinstance(root.tag, str):
        return None
    kind = etree.QName(root).localname
    if kind not in ("urlset", "sitemapindex"):
        return None
    return kind, [loc.text.strip() for loc in root.iter("{*}loc", "loc") if loc.text and loc.text.strip()]


_trafilatura_missing_logged = False


def _main_text(html: str, url: str) -> tuple[str, str, datetime | None]:
    """(main text as Markdown or "", title or "", published date or None) by trafilatura."""
    global _trafilatura_missing_logged
    try:
        import trafilatura
    except ImportError:  # e.g. lxml without lxml_html_clean: fall back on BeautifulSoup's text
        if not _trafilatura_missing_logged:
            logger.warning("trafilatura cannot be imported: web pages are read whole, with BeautifulSoup")
            _trafilatura_missing_logged = True
        return "", "", None
    markdown = trafilatura.extract(
        html,
        url=url,
        output_format="markdown",
        include_tables=True,
        include_comments=False,
        include_links=False,
        include_images=False,
    )
    metadata = trafilatura.extract_metadata(html, default_url=url, extensive=False)
    published = None
    if metadata.date:
        try:
            published = datetime.combine(date.fromisoformat(metadata.date[:10]), datetime.min.time(), tzinfo=UTC)
        except ValueError:
            published = None
    return markdown or "", (metadata.title or "").strip(), published


def page_read(html: str, *, url: str) -> ReadDocument:
    """A web page as a document: id and URI ``url``, its main text (sections from its headings),
    its title (metadata, else the first heading, else the URL) and published date (aware, UTC
    midnight of the page's date) when its metadata has one. ``InvalidInput`` when it has no text."""
    markdown, title, published = _main_text(html, url)
    try:
        if markdown.strip():
            document = read_bytes(markdown.encode(), name="page.md", external_id=url, uri=url)[0]
        else:
            document = read_bytes(html.encode(), name="page.html", external_id=url, uri=url)[0]
    except InvalidInput:
        raise InvalidInput(f"{url}: the page has no text.", code="empty_page") from None
    if title:
        document.title = title[:500]
    elif document.title in ("page", ""):
        document.title = url[:500]
    document.published_at = published
    return document


@dataclass
class _Html:
    """What a crawl needs of a page besides its text: its links and its robots meta tags."""

    links: list[str]
    index: bool = True
    follow: bool = True


def _html_parse(text: str, url: str) -> _Html:
    """The ``<a href>`` links of a page (absolute, normalized, in order) and its ``<meta name="robots">``."""
    import lxml.html
    from lxml import etree

    try:
        tree = lxml.html.document_fromstring(text.encode("utf-8"), parser=lxml.html.HTMLParser(encoding="utf-8"))
    except (etree.ParserError, ValueError):
        return _Html(links=[])
    page = _Html(links=[])
    for meta in tree.iter("meta"):
        if (meta.get("name") or "").strip().lower() in ("robots", "knowledgebasebot"):
            content = (meta.get("content") or "").lower()
            page.index = page.index and "noindex" not in content and "none" not in content
            page.follow = page.follow and "nofollow" not in content and "none" not in content
    base_tag = tree.find(".//base[@href]")
    base = urljoin(url, base_tag.get("href")) if base_tag is not None else url
    seen = set()
    for anchor in tree.iter("a"):
        href = (anchor.get("href") or "").strip()
        if not href or href.startswith(("#", "mailto:", "javascript:", "tel:", "data:")):
            continue
        link = url_normalize(href, base)
        if link and link not in seen:
            seen.add(link)
            page.links.append(link)
    return page


class WebConnector:
    """Reads a web source (module docstring). ``http`` (a ``urllib3.PoolManager``), ``sleep`` and
    ``clock`` can be replaced, e.g. to check the delay between requests without waiting."""

    def __init__(
        self,
        source: Source,
        *,
        http: urllib3.PoolManager | None = None,
        sleep: Callable[[float], None] = time.sleep,
        clock: Callable[[], float] = time.monotonic,
    ):
        self.source = source
        self.http = http or urllib3.PoolManager()
        self._sleep = sleep
        self._clock = clock
        self._last_request: float | None = None
        self.delay_s = float(source.crawl_delay_s)
        self.robots: RobotFileParser | None = None
        self.fetches = 0  # requests made, robots.txt and sitemaps included

    # -- HTTP ------------------------------------------------------------------------------

    def _wait(self) -> None:
        if self._last_request is not None:
            wait = self.delay_s - (self._clock() - self._last_request)
            if wait > 0:
                self._sleep(wait)

    def _fetch(self, url: str, *, known: Mapping[str, str] | None = None) -> _Answer:
        """GET ``url``, following redirects on its host (each hop asked with the conditions of
        ``known``'s fingerprint for it, when given). The body is read for a 200 whose type is
        HTML, XML or text (or not given). ``_FetchFailed`` when no usable answer comes."""
        host = urlsplit(url).hostname
        for _ in range(MAX_REDIRECTS + 1):
            headers = {"User-Agent": USER_AGENT, **(_conditions(known.get(url, "")) if known else {})}
            self._wait()
            self.fetches += 1
            try:
                response = self.http.request(
                    "GET",
                    url,
                    headers=headers,
                    redirect=False,
                    retries=False,
                    preload_content=False,
                    timeout=urllib3.Timeout(connect=TIMEOUT_S, read=TIMEOUT_S),
                )
            except urllib3.exceptions.NameResolutionError:
                raise _FetchFailed(f"{url}: could not connect (unknown host).") from None
            except urllib3.exceptions.NewConnectionError as exc:
                raise _FetchFailed(f"{url}: could not connect ({_connect_reason(exc)}).") from None
            except urllib3.exceptions.TimeoutError:
                raise _FetchFailed(f"{url}: no answer within {TIMEOUT_S:g} s.") from None
            except urllib3.exceptions.HTTPError as exc:
                raise _FetchFailed(f"{url}: the request failed ({_connect_reason(exc)}).") from None
            finally:
                self._last_request = self._clock()
            read = False
            try:
                if response.status in _REDIRECTS and response.headers.get("Location"):
                    target = url_normalize(response.headers["Location"], url)
                    if target is None or urlsplit(target).hostname != host:
                        return _Answer(url=target or url, status=0)
                    url = target
                    continue
                content_type = (response.headers.get("Content-Type") or "").split(";")[0].strip().lower()
                answer = _Answer(url=url, status=response.status, content_type=content_type, headers=response.headers)
                if response.status == 200 and (
                    not content_type or "html" in content_type or "xml" in content_type or content_type == "text/plain"
                ):
                    answer.body = self._body(response, url)
                    read = True
                return answer
            finally:
                # A connection goes back to the pool once its answer is read; one whose unread body is
                # large (a skipped file) is closed instead.
                remaining = response.length_remaining
                if read or (remaining is not None and remaining <= 64 * 1024):
                    response.drain_conn()
                else:
                    response.close()
                response.release_conn()
        raise _FetchFailed(f"{url}: more than {MAX_REDIRECTS} redirects.")

    @staticmethod
    def _body(response: urllib3.BaseHTTPResponse, url: str) -> bytes:
        """The body of ``response`` (decompressed), at most ``MAX_BODY_BYTES``."""
        chunks, size = [], 0
        try:
            for chunk in response.stream(64 * 1024):
                size += len(chunk)
                if size > MAX_BODY_BYTES:
                    raise _FetchFailed(f"{url}: larger than {MAX_BODY_BYTES // 2**20} MiB.")
                chunks.append(chunk)
        except urllib3.exceptions.TimeoutError:
            raise _FetchFailed(f"{url}: no answer within {TIMEOUT_S:g} s.") from None
        except urllib3.exceptions.HTTPError as exc:
            raise _FetchFailed(f"{url}: the answer broke off ({type(exc).__name__}).") from None
        return b"".join(chunks)

    def _fetch_or_unreachable(self, url: str, what: str) -> _Answer:
        """``_fetch`` for what the whole sync depends on: any failure is ``SourceUnreachable``."""
        try:
            answer = self._fetch(url)
        except _FetchFailed as exc:
            raise SourceUnreachable(f"The {what} could not be fetched: {exc}") from None
        if answer.status == 0:
            raise SourceUnreachable(f"The {what} {url} redirects to another host ({answer.url}).")
        if answer.status != 200:
            raise SourceUnreachable(f"The {what} {url} could not be fetched: the server answered {answer.status}.")
        return answer

    # -- robots.txt ------------------------------------------------------------------------

    def _robots_load(self, url: str) -> None:
        """Fetch and parse ``scheme://host/robots.txt`` of ``url``; a longer ``Crawl-delay`` wins."""
        parts = urlsplit(url)
        robots_url = f"{parts.scheme}://{parts.netloc}/robots.txt"
        robots = RobotFileParser(robots_url)
        try:
            answer = self._fetch(robots_url)
        except _FetchFailed as exc:
            raise SourceUnreachable(f"The site could not be reached: {exc}") from None
        if answer.status in (401, 403):
            robots.disallow_all = True
        elif answer.status >= 500:
            raise SourceUnreachable(f"{robots_url}: the server answered {answer.status}.")
        elif answer.status == 200:
            robots.parse(_decode(answer.body, answer.headers.get("Content-Type", "")).splitlines())
        else:  # missing (404), or redirected off the host
            robots.allow_all = True
        delay = robots.crawl_delay(USER_AGENT)
        if delay is not None and float(delay) > self.delay_s:
            self.delay_s = float(delay)
        self.robots = robots

    def _allowed(self, url: str) -> bool:
        return self.robots is None or self.robots.can_fetch(USER_AGENT, url)

    def _selected(self, url: str) -> bool:
        return path_selected(urlsplit(url).path, self.source.include, self.source.exclude)

    def _excluded(self, url: str) -> bool:
        return not path_selected(urlsplit(url).path, [], self.source.exclude)

    # -- pages -----------------------------------------------------------------------------

    def _page_item(self, answer: _Answer, known: Mapping[str, str]) -> Item:
        """The item of a fetched HTML page: unchanged when its fingerprint is the stored one, else read."""
        fingerprint = fingerprint_of(answer.headers, answer.body)
        if known.get(answer.url) == fingerprint:
            return Item(answer.url, fingerprint, unchanged=True)
        try:
            document = page_read(_decode(answer.body, answer.headers.get("Content-Type", "")), url=answer.url)
        except InvalidInput as exc:
            return Item(answer.url, fingerprint, error=exc.message)
        return Item(answer.url, fingerprint, documents=[document])

    @staticmethod
    def _failure(url: str, answer: _Answer) -> Item:
        return Item(url, error=f"{url}: the server answered {answer.status}.")

    # -- the sync --------------------------------------------------------------------------

    def items(self, known: Mapping[str, str]) -> Iterator[Item]:
        """Yield an ``Item`` per page of the site (see the module docstring and ``knowledge.connectors.base``).

        ``known`` maps page URLs to their stored fingerprints. ``SourceUnreachable`` when the start
        page, robots.txt or a sitemap cannot be had, or robots.txt forbids the start page.
        """
        start = url_normalize(self.source.location)
        if start is None:
            raise SourceUnreachable(f"{self.source.location!r} is not an http(s) URL.")
        self._robots_load(start)
        if not self._allowed(start):
            raise SourceUnreachable(f"The site's robots.txt forbids {USER_AGENT.split('/')[0]} to read {start}.")
        first = self._fetch_or_unreachable(start, "start page")
        listed = None if first.content_type in _HTML_TYPES else sitemap_urls(first.body)
        if listed is not None:
            yield from self._from_sitemap(first, listed, known)
        elif urlsplit(start).path.lower().endswith(".xml"):
            raise SourceUnreachable(f"{start} is not a sitemap (an XML urlset or sitemapindex).")
        elif not first.is_html:
            raise SourceUnreachable(
                f"{start} is neither an HTML page nor a sitemap (its type is {first.content_type or 'not given'})."
            )
        else:
            yield from self._crawl(first, known)

    def _from_sitemap(
        self, sitemap: _Answer, listed: tuple[str, list[str]], known: Mapping[str, str]
    ) -> Iterator[Item]:
        """The pages a sitemap (or the sitemaps of an index) lists, asked for with conditions."""
        scope = _Scope.around(sitemap.url)
        kind, locations = listed
        if kind == "sitemapindex":
            pages: list[str] = []
            for location in locations:
                child_url = url_normalize(location, sitemap.url)
                if child_url is None or urlsplit(child_url).netloc != urlsplit(sitemap.url).netloc:
                    continue
                child = self._fetch_or_unreachable(child_url, "sitemap")
                child_listed = sitemap_urls(child.body)
                if child_listed is None or child_listed[0] != "urlset":
                    raise SourceUnreachable(f"{child_url} (listed by {sitemap.url}) is not a sitemap of pages.")
                pages += child_listed[1]
        else:
            pages = locations
        urls = []
        for page in pages:
            url = url_normalize(page, sitemap.url)
            if url and url not in urls and scope.contains(url) and self._selected(url) and self._allowed(url):
                urls.append(url)
        keys: set[str] = set()
        for position, url in enumerate(urls):
            if len(keys) >= self.source.page_limit:
                yield from (Item(u, known[u], unchanged=True) for u in urls[position:] if u in known and u not in keys)
                return
            try:
                answer = self._fetch(url, known=known)
            except _FetchFailed as exc:
                item = Item(url, error=str(exc))
            else:
                if answer.url != url and (answer.url in keys or not scope.contains(answer.url)):
                    continue
                if answer.status == 304:
                    item = Item(answer.url, known.get(answer.url, ""), unchanged=answer.url in known)
                    if not item.unchanged:
                        item.error = f"{answer.url}: the server answered 304 to a request without conditions."
                elif answer.status in _GONE or answer.status == 0:
                    continue
                elif answer.status != 200:
                    item = self._failure(answer.url, answer)
                elif not answer.is_html:
                    continue
                else:
                    item = self._page_item(answer, known)
            keys.add(item.key)
            yield item

    def _crawl(self, first: _Answer, known: Mapping[str, str]) -> Iterator[Item]:
        """Breadth first from the start page (already fetched) within its scope (module docstring)."""
        scope = _Scope.around(first.url)
        limit = self.source.page_limit
        budget = FETCHES_PER_PAGE * limit + self.fetches
        queue: deque[tuple[str, _Answer | None]] = deque([(first.url, first)])
        queued = {url_normalize(self.source.location), first.url}
        keys: set[str] = set()  # the pages yielded
        done: set[str] = set()  # the URLs answered
        while queue and len(keys) < limit and self.fetches < budget:
            url, answer = queue.popleft()
            if url in done:
                continue
            if answer is None:
                try:
                    answer = self._fetch(url)
                except _FetchFailed as exc:
                    if self._selected(url):
                        keys.add(url)
                        yield Item(url, error=str(exc))
                    continue
            if answer.url != url:  # redirected
                if answer.status == 0 or answer.url in done or not scope.contains(answer.url):
                    continue
                queued.add(answer.url)
            done.update((url, answer.url))
            if answer.status in _GONE or answer.status == 0:
                continue
            if answer.status != 200:
                if self._selected(answer.url):
                    keys.add(answer.url)
                    yield self._failure(answer.url, answer)
                continue
            if not answer.is_html:
                continue
            page = _html_parse(_decode(answer.body, answer.headers.get("Content-Type", "")), answer.url)
            if page.follow:
                for link in page.links:
                    if link not in queued and scope.contains(link) and not self._excluded(link) and self._allowed(link):
                        queued.add(link)
                        queue.append((link, None))
            if page.index and self._selected(answer.url):
                keys.add(answer.url)
                yield self._page_item(answer, known)
        if queue:  # the limit was reached: pages not reached may still be there
            for key, fingerprint in known.items():
                if key not in keys and scope.contains(key) and self._selected(key) and self._allowed(key):
                    yield Item(key, fingerprint, unchanged=True)
