"""One PDF page as blocks in reading order: lines of text, table rows, figures, or the lines OCR
read from a page without a text layer.

A page is read from pdfplumber's words (``extract_words``: characters closer than
``WORD_GAP_EM`` of their size join a word), tables (``knowledge.ingestion.pdf.tables``) and
pictures. Words inside a table stay out of the running text; the table's rows stand where the
table stands in the reading order (``knowledge.ingestion.pdf.layout``). A picture of at least
``MIN_FIGURE_PT`` a side with a caption just below or above it (a line starting "Figure 2",
"Fig. 2") becomes one line ``[Figure: <caption>]``; pictures without a caption are left out.

A page with fewer than ``MIN_TEXT_CHARS`` characters of text and a picture over
``SCAN_COVER`` of its area, or no text at all and a picture, is a scan: it is rendered
(pdfplumber's ``to_image``, pdfium) at ``KB_OCR_DPI`` (less for a page so large that its longest
side would pass ``MAX_RENDER_PX``) and read by ``knowledge.ingestion.ocr.ocr_image``, while
``KB_OCR_MAX_PAGES`` pages are left to read (``OcrPages``); the others, and all of them when OCR is
off or not installed, are listed as skipped.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from django.conf import settings

from knowledge.ingestion.documents import normalize_text
from knowledge.ingestion.pdf.layout import Item, Line, reading_order
from knowledge.ingestion.pdf.tables import PdfTable, page_tables

# Characters whose gap is more than this share of their size start a new word (pdfplumber's
# x_tolerance_ratio): 2.2 points at 11 points, below a word space (0.25-0.3 em).
WORD_GAP_EM = 0.2
# A page with less text than this (characters) and a big picture is a scan.
MIN_TEXT_CHARS = 20
# The share of a page a picture must cover for the page to be taken for a scan.
SCAN_COVER = 0.5
# Smaller pictures (points, either side) are icons and rules, never figures.
MIN_FIGURE_PT = 36.0
# A caption stands at most this far (points) below or above its picture.
CAPTION_GAP_PT = 36.0
# Lines after a caption's first that still belong to it (same paragraph), at most.
MAX_CAPTION_LINES = 3
# A page is rendered for OCR with its longest side at most this many pixels.
MAX_RENDER_PX = 4000
_CAPTION = re.compile(r"^(?:Figure|FIGURE|Fig\.|FIG\.)\s*\d")
_TABLE_CAPTION = re.compile(r"^(?:Table|TABLE)\s*\d")
_LIGATURES = str.maketrans(
    {"\ufb00": "ff", "\ufb01": "fi", "\ufb02": "fl", "\ufb03": "ffi", "\ufb04": "ffl", "\ufb06": "st"}
)
_SOFT_HYPHEN = "\u00ad"


@dataclass
class Block:
    """A line of the document's text in reading order: ``kind`` "text", "row" (the ``row``-th of
    ``table``) or "figure" (``picture``: the picture's box; ``caption``). ``box`` is (x0, top, x1,
    bottom) in points on ``page`` (1-based), None for a line read without its place (a page
    pdfminer could not read); ``paragraph``: a blank line goes before it."""

    kind: str
    text: str
    box: tuple[float, float, float, float] | None
    page: int
    paragraph: bool = False
    table: PdfTable | None = None
    row: int = 0
    picture: tuple[float, float, float, float] | None = None
    caption: str = ""


@dataclass
class Picture:
    """A picture drawn on a page (points)."""

    box: tuple[float, float, float, float]


class OcrPages:
    """The scanned pages of one document: which were read, which skipped (over
    ``KB_OCR_MAX_PAGES``, or OCR off or not installed)."""

    def __init__(self):
        self.read: list[int] = []
        self.skipped: list[int] = []
        self.limit = settings.KB_OCR_MAX_PAGES

    def page_blocks(self, page, number: int) -> list[Block]:
        """The lines OCR reads on ``page`` (a pdfplumber page), or none when it is skipped.

        Raises what ``ocr_image`` raises except ``OcrUnavailable`` (the page is then skipped):
        ``OcrDeferred`` ends the parse for the OCR queue."""
        from knowledge.ingestion.ocr import OcrUnavailable, ocr_engine, ocr_image

        if len(self.read) >= self.limit:
            self.skipped.append(number)
            return []
        resolution = min(settings.KB_OCR_DPI, MAX_RENDER_PX * 72 / max(page.width, page.height, 1))
        try:
            ocr_engine()  # off or not installed: skipped before the page is rendered
            result = ocr_image(page.to_image(resolution=resolution).original)
        except OcrUnavailable:
            self.skipped.append(number)
            return []
        self.read.append(number)
        scale, left, top = 72 / resolution, float(page.bbox[0]), float(page.bbox[1])
        breaks = _paragraph_starts(result.text)
        blocks = []
        for index, line in enumerate(result.lines):
            text = clean_line(line.text)
            if text:
                x0, y0, x1, y1 = line.box
                box = (left + x0 * scale, top + y0 * scale, left + x1 * scale, top + y1 * scale)
                paragraph = not blocks or (len(breaks) == len(result.lines) and breaks[index])
                blocks.append(Block("text", text, box, number, paragraph=paragraph))
        return blocks


def _paragraph_starts(text: str) -> list[bool]:
    """For each non-blank line of OCR ``text``, whether a blank line stands before it."""
    starts, blank = [], True
    for line in text.split("\n"):
        if line.strip():
            starts.append(blank)
            blank = False
        else:
            blank = True
    return starts


def read_page(page, number: int, ocr: OcrPages) -> list[Block]:
    """The blocks of ``page`` (a pdfplumber page, ``number`` 1-based) in reading order."""
    words = page.extract_words(x_tolerance_ratio=WORD_GAP_EM, keep_blank_chars=False, use_text_flow=False)
    pictures = [_box(image, page) for image in page.images]
    characters = sum(len(word["text"]) for word in words)
    if _is_scan(page, characters, pictures):
        return ocr.page_blocks(page, number)
    tables = page_tables(page) if page.edges else []
    items = [Item("", *table.box, ref=table) for table in tables]
    for word in words:
        middle = ((word["x0"] + word["x1"]) / 2, (word["top"] + word["bottom"]) / 2)
        if not any(_inside(middle, table.box) for table in tables):
            items.append(Item(word["text"], word["x0"], word["top"], word["x1"], word["bottom"]))
    area = max(float(page.width * page.height), 1.0)
    for box in pictures:
        width, height = box[2] - box[0], box[3] - box[1]
        if min(width, height) >= MIN_FIGURE_PT and width * height < 0.85 * area:
            items.append(Item("", *box, ref=Picture(box)))
    lines = reading_order(items, float(page.bbox[0]), float(page.bbox[2]))
    return _blocks(lines, number)


def _box(image: dict, page) -> tuple[float, float, float, float]:
    """A picture's box, cut to the page."""
    x0, top, x1, bottom = page.bbox
    return (
        max(float(image["x0"]), float(x0)),
        max(float(image["top"]), float(top)),
        min(float(image["x1"]), float(x1)),
        min(float(image["bottom"]), float(bottom)),
    )


def _is_scan(page, characters: int, pictures: list[tuple[float, float, float, float]]) -> bool:
    if characters >= MIN_TEXT_CHARS or not pictures:
        return False
    area = max(float(page.width * page.height), 1.0)
    cover = max(max(0.0, b[2] - b[0]) * max(0.0, b[3] - b[1]) for b in pictures) / area
    return characters == 0 or cover >= SCAN_COVER


def _inside(point: tuple[float, float], box: tuple[float, float, float, float]) -> bool:
    return box[0] <= point[0] <= box[2] and box[1] <= point[1] <= box[3]


def clean_line(text: str) -> str:
    """A line's text on one line, normalized as the document's text will be (so offsets hold):
    whitespace runs as one space, typographic ligatures spelled out ("ﬁ" as "fi", so a search
    for "file" finds it), soft hyphens dropped but at the line's end (where they mark a word
    ``join_hyphenated`` joins)."""
    text = " ".join(text.translate(_LIGATURES).split())
    return normalize_text(text[:-1].replace(_SOFT_HYPHEN, "") + text[-1:])


def _blocks(lines: list[Line], number: int) -> list[Block]:
    """Blocks of ``lines``: a table's rows, a figure with its caption lines, lines of words."""
    captions = _captions(lines)
    consumed = {index for indexes in captions.values() for index in indexes}
    blocks: list[Block] = []
    for index, line in enumerate(lines):
        ref = line.ref
        if isinstance(ref, PdfTable):
            captioned = bool(blocks) and _is_table_caption(blocks[-1], ref)
            for row, box in enumerate(ref.row_boxes):
                blocks.append(Block("row", "", box, number, paragraph=row == 0 and not captioned, table=ref, row=row))
        elif isinstance(ref, Picture):
            if index in captions:
                parts = [lines[i] for i in captions[index]]
                caption = clean_line(" ".join(part.text for part in parts))
                box = _union([ref.box, *(part.box for part in parts)])
                blocks.append(
                    Block("figure", f"[Figure: {caption}]", box, number, True, picture=ref.box, caption=caption)
                )
        elif index not in consumed:
            text = clean_line(line.text)
            if text:
                paragraph = line.paragraph or not blocks or blocks[-1].kind != "text"
                blocks.append(Block("text", text, line.box, number, paragraph=paragraph))
    return blocks


def _captions(lines: list[Line]) -> dict[int, list[int]]:
    """For each picture line's index, the indexes of its caption's lines (the caption below the
    picture first, else above it)."""
    captions: dict[int, list[int]] = {}
    taken: set[int] = set()
    for index, line in enumerate(lines):
        if not isinstance(line.ref, Picture):
            continue
        for candidate in (index + 1, index - 1):
            if candidate in taken or not 0 <= candidate < len(lines) or lines[candidate].ref is not None:
                continue
            if _is_caption(lines[candidate], line.ref.box):
                parts = [candidate]
                while (
                    len(parts) < MAX_CAPTION_LINES
                    and parts[-1] + 1 < len(lines)
                    and lines[parts[-1] + 1].ref is None
                    and not lines[parts[-1] + 1].paragraph
                ):
                    parts.append(parts[-1] + 1)
                captions[index] = parts
                taken.update(parts)
                break
    return captions


def _is_caption(line: Line, picture: tuple[float, float, float, float]) -> bool:
    x0, top, x1, bottom = line.box
    near = -2 <= top - picture[3] <= CAPTION_GAP_PT or -2 <= picture[1] - bottom <= CAPTION_GAP_PT
    return near and x0 < picture[2] and x1 > picture[0] and bool(_CAPTION.match(line.text))


def _is_table_caption(block: Block, table: PdfTable) -> bool:
    """Whether ``block`` is the caption of ``table`` under it ("Table 3: ..."): it then stays on the
    line before the table, as Markdown tables of the other readers have it."""
    return (
        block.kind == "text"
        and bool(_TABLE_CAPTION.match(block.text))
        and -2 <= table.box[1] - block.box[3] <= CAPTION_GAP_PT
    )


def _union(boxes) -> tuple[float, float, float, float]:
    boxes = list(boxes)
    return (
        min(b[0] for b in boxes),
        min(b[1] for b in boxes),
        max(b[2] for b in boxes),
        max(b[3] for b in boxes),
    )
