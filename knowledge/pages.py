"""Pages of paged documents (PDFs; a presentation's slides): which page a span of the text is on.

A reader of a paged document puts in ``ReadDocument.metadata``:

* ``"pages"``: the page count;
* ``"page_starts"``: the character offset in the document's (normalized) text where each page
  starts, ascending, the first 0, one per page;
* ``"regions"`` (PDFs): ``[page, x0, top, x1, bottom, start, end]`` per line of text (or table
  row): its box on the page in PDF points from the page's top-left corner, and the character
  offsets ``[start, end)`` of its text.

Ingestion stores each chunk's pages in ``Chunk.metadata`` (``"page"``, ``"page_end"``: 1-based,
the pages of its first and last character), so every output path reads them from the chunk
(``chunk_pages``). Pure functions, no database.
"""

from __future__ import annotations

from bisect import bisect_right

import numpy as np

# What the document row keeps of a reader's metadata: everything but the regions, which can run to
# 50,000 entries (megabytes of JSON in every read of the row and in the documents API); they are
# kept per version beside the original file (``knowledge.services.originals``).
LAYOUT_KEYS = ("regions",)


def page_starts_of(metadata: dict | None, text_length: int) -> list[int] | None:
    """``metadata["page_starts"]`` when it is well formed for a text of ``text_length`` characters
    (a non-empty list of ints, ascending, the first 0, none past the end, as many as
    ``metadata["pages"]`` when that is given); ``None`` otherwise (a document without pages, or
    offsets that cannot be trusted: no page is better than a wrong one)."""
    starts = (metadata or {}).get("page_starts")
    if not isinstance(starts, list) or not starts or starts[0] != 0:
        return None
    if not all(type(start) is int for start in starts):
        return None
    if any(b < a for a, b in zip(starts, starts[1:], strict=False)) or starts[-1] > text_length:
        return None
    pages = (metadata or {}).get("pages")
    if type(pages) is int and pages != len(starts):
        return None
    return starts


def span_pages(page_starts: list[int], start: int, end: int) -> tuple[int, int]:
    """(The page of character ``start``, the page of character ``end - 1``), 1-based, for the span
    ``[start, end)`` of a text whose pages start at ``page_starts`` (an empty span: its start's
    page twice)."""
    first = bisect_right(page_starts, start)
    last = bisect_right(page_starts, max(end - 1, start))
    return max(first, 1), max(last, first, 1)


def chunk_page_metadata(page_starts: list[int] | None, start: int, end: int) -> dict:
    """What a chunk ``[start, end)`` keeps in ``Chunk.metadata`` about its pages:
    ``{"page": p, "page_end": q}``, or ``{}`` for a document without pages."""
    if not page_starts:
        return {}
    page, page_end = span_pages(page_starts, start, end)
    return {"page": page, "page_end": page_end}


def chunk_pages(chunk) -> dict:
    """``{"page", "page_end"}`` of a chunk (``knowledge.Chunk``) as search hits and citations
    carry them: 1-based ints from its metadata, ``None`` for a chunk of a document without pages
    (and for a document's summary)."""
    metadata = chunk.metadata or {}
    page, page_end = metadata.get("page"), metadata.get("page_end")
    if type(page) is not int:
        return {"page": None, "page_end": None}
    return {"page": page, "page_end": page_end if type(page_end) is int else page}


def page_label(page: int | None, page_end: int | None = None) -> str:
    """ "p. 12", "pp. 12-13", or "" without a page."""
    if not page:
        return ""
    if page_end and page_end != page:
        return f"pp. {page}-{page_end}"
    return f"p. {page}"


def document_metadata(metadata: dict | None) -> dict:
    """A reader's metadata as the document row keeps it: without ``LAYOUT_KEYS``."""
    return {key: value for key, value in (metadata or {}).items() if key not in LAYOUT_KEYS}


def regions_array(regions) -> np.ndarray | None:
    """A reader's ``metadata["regions"]`` as an ``(n, 7)`` float64 array, or ``None`` when it is
    not a list of seven numbers per line (then no line boxes are kept: none beat wrong ones)."""
    if not isinstance(regions, list) or not regions:
        return None
    try:
        array = np.asarray(regions, dtype=np.float64)
    except (TypeError, ValueError):
        return None
    if array.ndim != 2 or array.shape[1] != 7 or not np.isfinite(array).all():
        return None
    return array


def regions_on_pages(regions: np.ndarray, start: int, end: int) -> dict[int, list[list[float]]]:
    """The boxes ``[x0, top, x1, bottom]`` (PDF points from the page's top-left, 1 decimal) of the
    ``regions`` (``regions_array``) whose characters overlap ``[start, end)``, by page (1-based)."""
    if not len(regions):
        return {}
    hits = regions[(regions[:, 5] < end) & (regions[:, 6] > start)]
    boxes: dict[int, list[list[float]]] = {}
    for page, x0, top, x1, bottom, _, _ in hits.round(1).tolist():
        boxes.setdefault(int(page), []).append([x0, top, x1, bottom])
    return boxes
