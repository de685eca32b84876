"""How the web connector finds pages: URLs normalized, a page's links and robots directives, sitemaps.

Used by ``knowledge.connectors.web`` (its module docstring describes discovery and politeness).
Nothing here fetches: each function reads what the connector fetched.
"""

from __future__ import annotations

import gzip
import io
from urllib.parse import urljoin, urlsplit, urlunsplit

from django.conf import settings

from knowledge.connectors.base import SourceUnreachable

BOT_NAME = "KnowledgeBaseBot"


def max_bytes() -> int:
    """The largest page, sitemap or ``robots.txt`` read (``KB_WEB_MAX_PAGE_MB``), in bytes."""
    return int(settings.KB_WEB_MAX_PAGE_MB * 2**20)


def url_normalize(url: str) -> str:
    """``url`` without its fragment, with a lower-case scheme and host, no default port, and a path
    (``/`` when empty)."""
    parts = urlsplit(url.strip())
    scheme = parts.scheme.lower()
    host = (parts.hostname or "").lower()
    if ":" in host:  # IPv6
        host = f"[{host}]"
    try:
        port = parts.port
    except ValueError:  # not a port: kept as it is, so the URL matches no site
        port, host = None, parts.netloc.lower()
    if port and not (scheme == "http" and port == 80) and not (scheme == "https" and port == 443):
        host = f"{host}:{port}"
    return urlunsplit((scheme, host, parts.path or "/", parts.query, ""))


def _tree(body: bytes):
    """A page's parsed HTML (lxml), or None when it cannot be parsed."""
    import lxml.html
    from lxml.etree import ParserError

    try:
        return lxml.html.fromstring(body)
    except (ParserError, ValueError):
        return None


def robots_directives(tree) -> set[str]:
    """The lower-case directives of a page's ``<meta name="robots">`` (or ``name="KnowledgeBaseBot"``);
    ``none`` stands for ``noindex`` and ``nofollow``."""
    directives: set[str] = set()
    for element in tree.iter("meta"):
        if (element.get("name") or "").strip().lower() in ("robots", BOT_NAME.lower()):
            directives.update(d.strip().lower() for d in (element.get("content") or "").split(","))
    if "none" in directives:
        directives |= {"noindex", "nofollow"}
    return directives


def page_noindex(body: bytes) -> bool:
    """Whether a page (its HTML ``body``) asks not to be indexed (``<meta name="robots" content="noindex">``)."""
    tree = _tree(body)
    return tree is not None and "noindex" in robots_directives(tree)


def page_links(body: bytes, *, url: str) -> list[str]:
    """The normalized absolute URLs of the ``<a href>`` links of the page at ``url`` (its HTML
    ``body``), honouring ``<base href>``; none when its ``<meta name="robots">`` says ``nofollow``."""
    tree = _tree(body)
    if tree is None or "nofollow" in robots_directives(tree):
        return []
    base = url
    for element in tree.iter("base"):
        if element.get("href"):
            base = urljoin(url, element.get("href").strip())
            break
    links = []
    for element in tree.iter("a"):
        href = (element.get("href") or "").strip()
        if not href or href.startswith(("#", "mailto:", "javascript:", "tel:")):
            continue
        link = urljoin(base, href)
        if urlsplit(link).scheme in ("http", "https"):
            links.append(url_normalize(link))
    return links


def sitemap_parse(body: bytes, *, url: str = "") -> tuple[str | None, list[str]]:
    """(``"urlset"`` or ``"sitemapindex"``, its ``<loc>`` values) of a sitemap, gzipped or not;
    (None, []) for anything else. ``SourceUnreachable`` when a gzipped sitemap (``url``) unpacks
    past ``KB_WEB_MAX_PAGE_MB``.

    Entities are not resolved and nothing is fetched by the parser.
    """
    from lxml import etree

    if body[:2] == b"\x1f\x8b":  # a gzipped sitemap (sitemap.xml.gz), unpacked to at most max_bytes()
        try:
            body = gzip.GzipFile(fileobj=io.BytesIO(body)).read(max_bytes() + 1)
        except (OSError, EOFError):
            return None, []
        if len(body) > max_bytes():
            raise SourceUnreachable(f"{url}: the sitemap is larger than {max_bytes() / 2**20:g} MB once unpacked.")
    parser = etree.XMLParser(resolve_entities=False, no_network=True, huge_tree=False, recover=False)
    try:
        root = etree.fromstring(body.strip(), parser=parser)
    except (etree.XMLSyntaxError, ValueError):
        return None, []
    kind = etree.QName(root).localname if isinstance(root.tag, str) else ""
    if kind not in ("urlset", "sitemapindex"):
        return None, []
    entry = "url" if kind == "urlset" else "sitemap"
    locations = []
    for element in root:  # <url> or <sitemap>; other <loc>s (images, videos) are not pages
        if not isinstance(element.tag, str) or etree.QName(element).localname != entry:
            continue
        for loc in element:
            if isinstance(loc.tag, str) and etree.QName(loc).localname == "loc" and loc.text and loc.text.strip():
                locations.append(loc.text.strip())
                break
    return kind, locations
