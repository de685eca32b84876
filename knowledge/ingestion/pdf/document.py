"""A PDF's pages of blocks (``knowledge.ingestion.pdf.page``) made into one text, with where each
page and each line stands in it.

Across pages, before the text is written:

* running headers and footers go: a line in the top or bottom ``RUNNING_ZONE`` of its page whose
  text, digits aside ("Page 3 of 9" = "Page 7 of 9"), stands there on at least half of the pages,
  and on ``MIN_RUNNING_PAGES`` pages or more, counting the pages with other text (a document
  whose pages say nothing but "Page N" keeps it);
* a word hyphenated at a line's end is joined: a line ending in a letter and a hyphen (or a soft
  hyphen) followed by a line that starts with a lower-case letter loses the hyphen and takes the
  next line's first word (across columns and pages too);
* a table first on its page with the columns of the table last on the page before continues it:
  its rows follow that table's, without a header (a header repeated at the top of the page is
  dropped), and the page is joined to the one before by a line break, not a blank line, so the
  Markdown table stays one table.

Then each page's lines are joined (a blank line before a paragraph), pages by a blank line, and
the offsets are taken from that final text: ``page_starts`` (an empty page starts where the next
text does), ``regions`` (one per line of text, table row or figure; dropped past
``MAX_REGIONS``) and ``figures``. Every line is normalized on its own first, so the joined text is
already normalized (checked: ``normalize_text(text) == text``).
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field

from knowledge.ingestion.pdf.page import Block, clean_line
from knowledge.ingestion.pdf.tables import continues, row_line, separator_line

# The top and bottom share of a page where running headers and footers stand.
RUNNING_ZONE = 0.08
# A running line repeats on at least this many pages (and on half of them).
MIN_RUNNING_PAGES = 3
# Past this many lines the regions are left out (the page offsets stay).
MAX_REGIONS = 50_000
_DIGITS = re.compile(r"\d+")
_HYPHENATED = re.compile(r"[^\W\d_][-\u00ad\u2010]$")


@dataclass
class PdfText:
    """The document's text and what locates its parts (the metadata's shapes)."""

    text: str
    page_starts: list[int]
    regions: list[list] | None
    figures: list[dict] = field(default_factory=list)


def drop_running_lines(pages: list[list[Block]], bounds: list[tuple[float, float]]) -> None:
    """Remove the running headers and footers from ``pages`` (in place); ``bounds`` is each page's
    (top, bottom) in points. A line counts alone and with the lines beside it (a header of two
    parts read into two columns is still one header)."""
    zones = [_margin_rows(blocks, top, bottom) for blocks, (top, bottom) in zip(pages, bounds, strict=True)]
    counts: Counter[str] = Counter()
    for blocks, rows in zip(pages, zones, strict=True):
        if len(blocks) > sum(len(row) for row in rows):  # a page with text besides: "Page 3" alone is text
            counts.update({key for row in rows for key in _row_keys(row)})
    needed = max(MIN_RUNNING_PAGES, (len(pages) + 1) // 2)
    running = {key for key, count in counts.items() if count >= needed}
    if not running:
        return
    for blocks, rows in zip(pages, zones, strict=True):
        dropped = set()
        for row in rows:
            row_key = _row_keys(row)[0]
            dropped.update(id(b) for b in row if row_key in running or _running_key(b.text) in running)
        if dropped:
            blocks[:] = [b for b in blocks if id(b) not in dropped]
            if blocks:
                blocks[0].paragraph = True


def _margin_rows(blocks: list[Block], top: float, bottom: float) -> list[list[Block]]:
    """The lines of text in a page's top and bottom ``RUNNING_ZONE``, grouped into rows (lines
    whose heights overlap), each row left to right."""
    margin = RUNNING_ZONE * (bottom - top)
    zone = [
        b
        for b in blocks
        if b.kind == "text" and b.box is not None and (b.box[1] < top + margin or b.box[3] > bottom - margin)
    ]
    rows: list[list[Block]] = []
    for block in sorted(zone, key=lambda b: b.box[1]):
        if rows and block.box[1] < max(b.box[3] for b in rows[-1]):
            rows[-1].append(block)
        else:
            rows.append([block])
    return [sorted(row, key=lambda b: b.box[0]) for row in rows]


def _row_keys(row: list[Block]) -> list[str]:
    """The row's key (its lines' text together), then each line's."""
    return [_running_key(" ".join(b.text for b in row)), *(_running_key(b.text) for b in row)]


def _running_key(text: str) -> str:
    """What a running line is known by: lower case, digits as ``#`` ("Page 3" = "Page 7")."""
    return _DIGITS.sub("#", " ".join(text.lower().split()))


def join_hyphenated(pages: list[list[Block]]) -> None:
    """Join the words hyphenated at line ends (in place); a line left empty is removed."""
    previous: Block | None = None
    for blocks in pages:
        for block in blocks:
            if block.kind != "text":
                previous = None
                continue
            if previous is not None and _HYPHENATED.search(previous.text) and block.text[:1].islower():
                first, _, rest = block.text.partition(" ")
                previous.text = previous.text[:-1] + first
                block.text = rest
            if block.text:
                previous = block
        blocks[:] = [b for b in blocks if b.kind != "text" or b.text]


def join_continued_tables(pages: list[list[Block]]) -> None:
    """Mark each table that continues the last table of the page before (in place), and drop its
    first row where it repeats the header."""
    for before, blocks in zip(pages, pages[1:], strict=False):
        if not before or not blocks or before[-1].kind != "row" or blocks[0].kind != "row":
            continue
        previous, table = before[-1].table, blocks[0].table
        if table is None or previous is None or blocks[0].row != 0 or not continues(table, previous):
            continue
        table.continued = True
        table.header = previous.header if previous.continued else previous.rows[0]
        blocks[0].paragraph = False
        if table.rows[0] == table.header:
            del blocks[0]


def document_text(pages: list[list[Block]]) -> PdfText:
    """The text of ``pages`` and the offsets of its pages, lines and figures."""
    text_parts: list[str] = []
    length = 0
    starts: list[int | None] = []
    regions: list[list] = []
    figures: list[dict] = []
    for number, blocks in enumerate(pages, start=1):
        lines = _page_lines(blocks)
        if not lines:
            starts.append(None)
            continue
        glue = "" if not text_parts else ("\n" if _continues_table(blocks) else "\n\n")
        page_start = length + len(glue)
        starts.append(page_start)
        position = page_start
        for line, block in lines:
            if block is not None and block.box is not None:
                end = position + len(line)
                regions.append([number, *(round(v, 1) for v in block.box), position, end])
                if block.kind == "figure":
                    figure = {"page": number, "bbox": [round(v, 1) for v in block.picture or block.box]}
                    figures.append({**figure, "caption": block.caption, "start": position, "end": end})
            position += len(line) + 1
        page_text = "\n".join(line for line, _ in lines)
        text_parts += [glue, page_text]
        length += len(glue) + len(page_text)
    text = "".join(text_parts)
    return PdfText(
        text=text,
        page_starts=_filled(starts, len(text)),
        regions=regions if len(regions) <= MAX_REGIONS else None,
        figures=figures,
    )


def _continues_table(blocks: list[Block]) -> bool:
    first = blocks[0]
    return first.kind == "row" and first.table is not None and first.table.continued and not first.paragraph


def _page_lines(blocks: list[Block]) -> list[tuple[str, Block | None]]:
    """The lines of one page: (text, the block it locates, or None for a blank line or a table's
    separator)."""
    lines: list[tuple[str, Block | None]] = []
    for block in blocks:
        if block.paragraph and lines:
            lines.append(("", None))
        if block.kind != "row":
            lines.append((clean_line(block.text), block))
            continue
        table = block.table
        lines.append((clean_line(row_line(table.rows[block.row])), block))
        if block.row == 0 and not table.continued:
            lines.append((separator_line(table.width), None))
    return lines


def _filled(starts: list[int | None], end: int) -> list[int]:
    """Each page's start; a page without text starts where the next page's text does (or at ``end``)."""
    filled: list[int] = []
    following = end
    for start in reversed(starts):
        following = start if start is not None else following
        filled.append(following)
    return filled[::-1]
