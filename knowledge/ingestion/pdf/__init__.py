"""The PDF reader: text in reading order, page by page, with where each page and line stands.

``read_pdf`` runs in the parse sandbox's child (``knowledge.ingestion.sandbox``). Two passes over
each page, in turn:

1. pypdf counts what the page's content streams (and the form XObjects they draw) decompress to,
   against the caps (``knowledge.ingestion.pdf.budget``): an ``archive_bomb`` is refused before
   the layout reader decompresses it again;
2. pdfplumber (pdfminer) reads the page's words with their boxes, its ruled tables and its
   pictures (``knowledge.ingestion.pdf.page``): lines in reading order, two columns read one after
   the other (``knowledge.ingestion.pdf.layout``), tables as Markdown rows
   (``knowledge.ingestion.pdf.tables``), figures with their captions; a scanned page is read by
   OCR within ``KB_OCR_MAX_PAGES``.

Then across pages (``knowledge.ingestion.pdf.document``): running headers and footers dropped,
hyphenated words joined, a table that runs over a page break joined into one. The
``ReadDocument``'s metadata holds ``pages``, ``page_starts``, ``regions``, ``figures``,
``ocr_pages`` and ``ocr_skipped`` (their shapes: ``knowledge.pages`` and ``docs/ingestion.md``).

Time: pdfplumber takes about 0.13 s of CPU for a page of text on two cores, 25 times pypdf
(``python benchmarks/pdf_layout.py``; ``docs/ingestion.md``, "PDF"), so each page read adds
``PAGE_TIMEOUT_S`` to the parse's time limits (``sandbox.parse_time_extend``, within the
``time_allowance_s`` that ``read_bytes`` gives a PDF's parse).
"""

from __future__ import annotations

import io
import logging
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from django.conf import settings

from core.errors import ApplicationError, InvalidInput
from knowledge.ingestion import sandbox
from knowledge.ingestion.documents import ReadDocument, normalize_text
from knowledge.ingestion.pdf.budget import RATIO_EXEMPT_BYTES, PdfBudget, page_streams
from knowledge.ingestion.pdf.document import (
    PdfText,
    document_text,
    drop_running_lines,
    join_continued_tables,
    join_hyphenated,
)
from knowledge.ingestion.pdf.page import Block, OcrPages, clean_line, read_page

__all__ = [
    "PAGE_TIMEOUT_S",
    "PRELOAD",
    "RATIO_EXEMPT_BYTES",
    "PdfBudget",
    "page_streams",
    "read_pdf",
    "time_allowance_s",
]

logger = logging.getLogger(__name__)

# Parse seconds (CPU and wall) each page read adds to KB_PARSE_TIMEOUT_S: twice the CPU time of a
# dense page of text (0.125 s for 2,800 characters on a 2-core VM), room for tables and pictures.
PAGE_TIMEOUT_S = 0.25
# What the reader imports in the child; ``parse_isolated`` loads it once in the parent.
PRELOAD = ("pypdf", "pdfplumber", "pypdfium2")


def time_allowance_s() -> float:
    """The most seconds a PDF's pages may add to its parse's time limit (``KB_PARSE_MAX_PDF_PAGES``
    pages at ``PAGE_TIMEOUT_S``), besides what OCR adds."""
    return settings.KB_PARSE_MAX_PDF_PAGES * PAGE_TIMEOUT_S


def read_pdf(data: bytes, *, name: str, external_id: str, uri: str) -> ReadDocument:
    """Read a PDF page by page under the caps (run in the sandbox's child).

    More than ``KB_PARSE_MAX_PDF_PAGES`` pages, or more than ``KB_PARSE_MAX_CHARS`` characters
    read so far, is ``document_too_large``; a page's streams past the unpacked caps are an
    ``archive_bomb`` (``PdfBudget``). The errors of pypdf and pdfminer (damaged files, their
    limits, a missing dependency) become ``InvalidInput``; ``OcrDeferred`` (the file goes to the
    OCR queue) and the other ``ApplicationError`` pass unchanged.
    """
    from pypdf import PdfReader
    from pypdf.errors import DependencyError, FileNotDecryptedError, LimitReachedError

    if not data.strip():
        raise InvalidInput(f"{name}: the file is empty.", code="empty_file")
    encrypted = InvalidInput(
        f"{name}: the PDF is encrypted (password-protected); save it without a password.", code="encrypted_file"
    )
    try:
        reader = PdfReader(io.BytesIO(data))
        if reader.is_encrypted and not reader.decrypt(""):
            raise encrypted
        page_count = len(reader.pages)
        if page_count > settings.KB_PARSE_MAX_PDF_PAGES:
            raise InvalidInput(
                f"{name}: the PDF has {page_count:,} pages; the limit is {settings.KB_PARSE_MAX_PDF_PAGES:,}. "
                "Split it into smaller files.",
                code="document_too_large",
            )
        ocr = OcrPages()
        pages, bounds = _read_pages(data, reader, budget=PdfBudget(name=name, file_size=len(data)), ocr=ocr)
        meta_title = str((reader.metadata.title if reader.metadata else None) or "")
    except ApplicationError:
        raise
    except FileNotDecryptedError as exc:
        raise encrypted from exc
    except LimitReachedError as exc:
        bomb = any(word in str(exc).lower() for word in ("decompress", "decoding"))
        raise InvalidInput(
            f"{name}: the PDF passes a limit of its reader ({_short(exc)}); it may be built to exhaust the server.",
            code="archive_bomb" if bomb else "document_too_large",
        ) from exc
    except DependencyError as exc:
        raise InvalidInput(
            f"{name}: the PDF needs a feature that is not installed ({_short(exc)}).", code="invalid_pdf"
        ) from exc
    except MemoryError:
        raise  # the sandbox names the memory limit
    except Exception as exc:  # PdfReadError, PDFSyntaxError, and the plain errors of a damaged file
        raise InvalidInput(f"{name}: not a readable PDF ({_short(exc)}).", code="invalid_pdf") from exc
    read = _assembled(pages, bounds)
    return ReadDocument(
        external_id=external_id,
        uri=uri,
        title=(meta_title or _first_line(read.text) or Path(name).stem)[:500],
        text=read.text,
        metadata=_metadata(read, pages=len(pages), ocr=ocr),
    )


def _read_pages(
    data: bytes, reader, *, budget: PdfBudget, ocr: OcrPages
) -> tuple[list[list[Block]], list[tuple[float, float]]]:
    """Each page's blocks and its (top, bottom) in points; each page's streams counted before
    it is read, its characters after. A page pdfminer cannot read (or all of them, when it cannot
    open the file) is read by pypdf, as plain lines without boxes (``_plain_page``)."""
    pages: list[list[Block]] = []
    bounds: list[tuple[float, float]] = []
    with _layout_document(data) as layout:
        layout_pages = _pages_of(layout)
        for index, page in enumerate(reader.pages):
            budget.count_streams(page)
            sandbox.parse_time_extend(PAGE_TIMEOUT_S)
            blocks, bound = None, (0.0, float(page.mediabox.height))
            if index < len(layout_pages):
                blocks, bound = _layout_page(layout_pages[index], index + 1, ocr)
            if blocks is None:
                blocks = _plain_page(page, index + 1)
            budget.count_text(sum(_characters(block) for block in blocks))
            pages.append(blocks)
            bounds.append(bound)
    return pages, bounds


@contextmanager
def _layout_document(data: bytes) -> Iterator[object | None]:
    """The file opened by pdfplumber, or None when pdfminer cannot open it."""
    import pdfplumber

    try:
        pdf = pdfplumber.open(io.BytesIO(data))
    except Exception:  # its own errors for a file pypdf could open: pypdf reads the pages
        logger.warning(
            "pdfminer could not open a PDF that pypdf reads; its pages are read without layout", exc_info=True
        )
        yield None
        return
    with pdf:
        yield pdf


def _pages_of(layout) -> list:
    if layout is None:
        return []
    try:
        return list(layout.pages)
    except Exception:
        logger.warning("pdfminer could not list a PDF's pages; they are read without layout", exc_info=True)
        return []


def _layout_page(layout_page, number: int, ocr: OcrPages) -> tuple[list[Block] | None, tuple[float, float]]:
    """``read_page``, and the page's (top, bottom); (None, …) when pdfminer fails on the page.
    The domain's errors (OCR's among them), memory and recursion errors pass."""
    bound = (float(layout_page.bbox[1]), float(layout_page.bbox[3]))
    try:
        return read_page(layout_page, number, ocr), bound
    except (ApplicationError, MemoryError, RecursionError):
        raise
    except Exception:
        logger.warning("pdfminer could not read page %d of a PDF; pypdf reads it", number, exc_info=True)
        return None, bound
    finally:
        layout_page.close()


def _plain_page(page, number: int) -> list[Block]:
    """A page's text as pypdf extracts it: one block per line, without a box."""
    blocks: list[Block] = []
    blank = True
    for line in (page.extract_text() or "").split("\n"):
        text = clean_line(line)
        if text:
            blocks.append(Block("text", text, None, number, paragraph=blank))
        blank = not text
    return blocks


def _characters(block: Block) -> int:
    if block.kind == "row" and block.table is not None:
        return sum(len(cell) for cell in block.table.rows[block.row])
    return len(block.text)


def _assembled(pages: list[list[Block]], bounds: list[tuple[float, float]]) -> PdfText:
    drop_running_lines(pages, bounds)
    join_hyphenated(pages)
    join_continued_tables(pages)
    read = document_text(pages)
    if normalize_text(read.text) != read.text:  # never expected: each line was normalized alone
        logger.warning("A PDF's text changed when normalized again; its page offsets are left out")
        return PdfText(text=normalize_text(read.text), page_starts=[], regions=None)
    return read


def _metadata(read: PdfText, *, pages: int, ocr: OcrPages) -> dict:
    metadata: dict = {"pages": pages}
    if read.page_starts:
        metadata["page_starts"] = read.page_starts
    if read.regions is not None:
        metadata["regions"] = read.regions
    metadata["figures"] = read.figures
    metadata["ocr_pages"] = ocr.read
    metadata["ocr_skipped"] = ocr.skipped
    return metadata


def _first_line(text: str) -> str:
    return next((line.strip() for line in text.split("\n") if line.strip()), "")


def _short(exc: Exception) -> str:
    """A library's message on one line, at most 200 characters (its class name if it has none)."""
    message = " ".join(str(exc).split()) or type(exc).__name__
    return message if len(message) <= 200 else message[:199] + "…"
