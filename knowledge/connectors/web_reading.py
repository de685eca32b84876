"""How the web connector reads a page: its main text as Markdown, its title and date.

Used by ``knowledge.connectors.web`` (``page_read``), in the parse sandbox's child
(``knowledge.ingestion.sandbox``).
"""

from __future__ import annotations

import logging
import re
from datetime import UTC, datetime
from functools import partial

from core.errors import InvalidInput
from knowledge.ingestion import sandbox
from knowledge.ingestion.readers import ReadDocument, read_bytes

logger = logging.getLogger(__name__)


_MARKDOWN_ESCAPE = re.compile(r"\\([*_`~\[\]<])")


def page_read(html: bytes | str, *, url: str, encoding: str | None = None) -> ReadDocument:
    """An HTML page as a ``ReadDocument`` (external id and URI: ``url``), read by ``page_extract``
    in the parse sandbox's child (``knowledge.ingestion.sandbox``: trafilatura and lxml build a
    tree of the whole page, up to ``KB_WEB_MAX_PAGE_MB``).

    ``InvalidInput``: the page holds no text (``empty_file``), or its reading passed the
    sandbox's limits (``parse_timeout``, ``document_too_large``, ``parse_failed``).
    """
    parse = partial(page_extract, html, url=url, encoding=encoding)
    return sandbox.parse_isolated(parse, name=url, preload=("trafilatura", "bs4", "lxml.etree"))


def page_extract(html: bytes | str, *, url: str, encoding: str | None = None) -> ReadDocument:
    """``page_read`` in this process.

    The main text is trafilatura's Markdown (headings as sections, tables kept), titled and dated
    from the page's metadata; when trafilatura finds no text, the HTML reader reads the whole
    page. ``InvalidInput`` when the page holds no text.
    """
    import trafilatura
    from trafilatura.utils import decode_file

    if isinstance(html, bytes):
        # The header's charset, else the page's own <meta charset> or a guess (trafilatura).
        html = html.decode(encoding, "replace") if encoding else decode_file(html)
    extracted = None
    try:
        extracted = trafilatura.bare_extraction(
            html, url=url, include_tables=True, include_formatting=True, with_metadata=True
        )
    except Exception:  # trafilatura on a malformed page: the HTML reader below reads it
        logger.warning("trafilatura could not read %s", url, exc_info=True)
    # trafilatura escapes Markdown's inline characters (``KB\\_WORKERS``); the stored text keeps
    # them plain, as the page shows them, so identifiers are searched as written.
    markdown = _MARKDOWN_ESCAPE.sub(r"\1", (getattr(extracted, "text", "") or "")).strip()
    try:
        if markdown:
            document = read_bytes(markdown.encode(), name="page.md", external_id=url, uri=url)[0]
        else:
            document = read_bytes(html.encode(), name="page.html", external_id=url, uri=url)[0]
    except InvalidInput:
        raise InvalidInput(f"{url}: the page holds no text.", code="empty_file") from None
    title = (getattr(extracted, "title", "") or "").strip()
    if title:
        document.title = title[:500]
    document.published_at = _date(getattr(extracted, "date", "") or "")
    return document


def _date(value: str) -> datetime | None:
    """trafilatura's ``YYYY-MM-DD`` as midnight UTC; None when absent or malformed."""
    try:
        return datetime.strptime(value[:10], "%Y-%m-%d").replace(tzinfo=UTC)
    except ValueError:
        return None
