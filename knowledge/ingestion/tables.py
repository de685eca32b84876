"""Tables as Markdown text: written by the readers (office files, HTML, EPUB), found again by the
splitter (``knowledge.ingestion.splitters``), which repeats a long table's header in each chunk.

The shape (``markdown_table``)::

    Table 2: Nightly rates          <- the caption, when the table has one
    | City | Rate |                 <- the header: the table's first row
    | --- | --- |
    | Paris | 180 EUR |             <- one line per row, cells in order

A cell's whitespace (line breaks included) becomes single spaces and its ``|`` is escaped as
``\\|``. Rows without text and columns without text are left out; shorter rows are padded with
empty cells. A table of one column is not tabular (a box around a paragraph, a layout table):
its cells become lines of text.

Merged cells (``span_grid``): a value spanning several rows is repeated in each of them, so a row
read alone (a chunk of a long table) still has it; the other columns a value spans stay empty.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

# A line longer than this before a table is text, not its caption.
MAX_CAPTION_CHARS = 200
# A cell boundary in a Markdown table line: a "|" that is not escaped.
_UNESCAPED_PIPE = re.compile(r"(?<!\\)\|")
# How far one merged cell may span (HTML allows 1,000 columns and 65,534 rows).
MAX_SPAN = 1000


def cell_text(value) -> str:
    """A cell's text on one line: runs of whitespace become one space, ``|`` becomes ``\\|``."""
    return " ".join(str(value).split()).replace("|", "\\|")


def markdown_table(rows: list[list[str]], *, caption: str = "") -> str:
    """``rows`` (the first is the header) as a Markdown table, with ``caption`` on the line before.

    Cells are cleaned by ``cell_text``; rows and columns without text are left out. Returns the
    caption alone when no row has text, and a table of one column as its cells, a line each.
    """
    caption = " ".join(caption.split())
    rows = [[cell_text(cell) for cell in row] for row in rows]
    rows = [row for row in rows if any(row)]
    width = max((len(row) for row in rows), default=0)
    rows = [row + [""] * (width - len(row)) for row in rows]
    kept = [index for index, column in enumerate(zip(*rows, strict=True)) if any(column)]
    if len(kept) < width:
        rows = [[row[column] for column in kept] for row in rows]
    if len(kept) <= 1:
        return "\n".join([caption] * bool(caption) + [row[0] for row in rows if row])
    lines = [caption] * bool(caption) + [_line(rows[0]), _line(["---"] * len(kept))]
    lines.extend(_line(row) for row in rows[1:])
    return "\n".join(lines)


def _line(cells: list[str]) -> str:
    return "|" + "|".join(f" {cell} " if cell else " " for cell in cells) + "|"


@dataclass
class Cell:
    """A table cell as a format gives it: its text and how many columns and rows it spans."""

    text: str
    colspan: int = 1
    rowspan: int = 1


def span_grid(rows: list[list[Cell]]) -> list[list[str]]:
    """The grid of ``rows`` whose cells may span columns and rows (HTML's ``colspan``/``rowspan``).

    A value spanning rows is repeated in each (in its first column); the other positions it
    covers stay empty. Spans are capped at ``MAX_SPAN`` and at the table's last row, and what
    the spans add is limited to about twice the table's own text and cells: past that, cells
    take one position each. Linear in the grid's size.
    """
    budget = max(10_000, 2 * sum(len(cell.text) + 3 for row in rows for cell in row))
    above: dict[int, tuple[str, int]] = {}  # column -> (text repeated there, rows left)
    grid: list[list[str]] = []
    for index, row in enumerate(rows):
        out: list[str] = []
        below: dict[int, tuple[str, int]] = {}  # what this row's cells span into the next
        last_spanned = max(above, default=-1)
        cells = iter(row)
        cell = next(cells, None)
        while cell is not None or len(out) <= last_spanned:
            column = len(out)
            if column in above:
                text, left = above[column]
                out.append(text)
                if left > 1:
                    below[column] = (text, left - 1)
            elif cell is None:  # a gap before a column still spanned from above
                out.append("")
            else:
                colspan = max(1, min(cell.colspan, MAX_SPAN))
                rowspan = max(1, min(cell.rowspan, MAX_SPAN, len(rows) - index))
                cost = (colspan - 1) * 3 + (rowspan - 1) * (len(cell.text) + 3 * colspan)
                if cost > budget:
                    colspan = rowspan = 1
                budget -= cost if cost <= budget else 0
                out.extend([cell.text] + [""] * (colspan - 1))
                for offset in range(colspan if rowspan > 1 else 0):
                    below[column + offset] = (cell.text if offset == 0 else "", rowspan - 1)
                cell = next(cells, None)
        grid.append(out)
        above = below
    return grid


@dataclass(frozen=True)
class TableSpan:
    """Where a Markdown table stands in a text: ``start`` (its caption's start, else its
    header's), ``head_end`` (the end of its separator line), its body ``rows`` as ``(start,
    end)`` (without line ends) and ``end`` (its last line's end)."""

    start: int
    head_end: int
    rows: tuple[tuple[int, int], ...]
    end: int
    caption: bool

    def context(self, text: str) -> str:
        """What a part of the table repeats: its caption, header and separator lines."""
        return text[self.start : self.head_end]


def find_tables(text: str) -> list[TableSpan]:
    """The Markdown tables of ``text`` in order: a line with ``|``, a separator line under it (as
    many cells, each of ``-`` with an optional ``:``, and a ``|``), and the following lines with
    ``|`` up to a blank line. The line right before the header is its caption when it has no
    ``|`` and at most ``MAX_CAPTION_CHARS`` characters. Linear in ``len(text)``."""
    lines: list[tuple[int, int]] = []
    position = 0
    for line in text.split("\n"):
        lines.append((position, position + len(line)))
        position += len(line) + 1
    tables: list[TableSpan] = []
    index = 0
    while index + 1 < len(lines):
        header, separator = (text[a:b] for a, b in lines[index : index + 2])
        if "|" not in header or not _is_separator(separator, len(_cells(header))):
            index += 1
            continue
        start = lines[index][0]
        before = text[lines[index - 1][0] : lines[index - 1][1]] if index else ""
        previous_end = tables[-1].end if tables else -1
        caption = bool(before.strip()) and "|" not in before and len(before) <= MAX_CAPTION_CHARS
        if caption and lines[index - 1][0] > previous_end:
            start = lines[index - 1][0]
        else:
            caption = False
        last = index + 2
        while last < len(lines) and "|" in text[lines[last][0] : lines[last][1]]:
            last += 1
        rows = tuple(lines[index + 2 : last])
        tables.append(TableSpan(start, lines[index + 1][1], rows, lines[last - 1][1], caption))
        index = last
    return tables


def _cells(line: str) -> list[str]:
    """The cells of a Markdown table line: split at each ``|`` not escaped, without the outer ones."""
    body = line.strip()
    body = body[1:] if body.startswith("|") else body
    body = body[:-1] if body.endswith("|") and not body.endswith("\\|") else body
    return _UNESCAPED_PIPE.split(body)


def _is_separator(line: str, columns: int) -> bool:
    """A Markdown table's separator line for ``columns`` columns: as many cells, each of ``-``
    with an optional ``:`` at either end, and a ``|`` somewhere."""
    cells = [cell.strip().strip(":") for cell in _cells(line)]
    return "|" in line and len(cells) == columns and all(cell and not cell.strip("-") for cell in cells)


_HTML_ROW_GROUPS = {"thead", "tbody", "tfoot"}


def html_table(table) -> str:
    """A BeautifulSoup ``<table>`` as a Markdown table (``markdown_table``) with its ``<caption>``.

    Its rows are the ``<tr>`` of the table and of its ``thead``/``tbody``/``tfoot``, not those of
    tables nested in a cell: a nested table's text stays in its cell, flattened to one line.
    ``colspan``/``rowspan`` as ``span_grid`` places them. Each element is visited once.
    """
    from bs4 import Tag

    caption = table.find("caption", recursive=False)
    rows = []
    for child in table.find_all(True, recursive=False):
        group = child.find_all("tr", recursive=False) if child.name in _HTML_ROW_GROUPS else [child]
        rows.extend(row for row in group if row.name == "tr")
    grid = [
        [
            Cell(cell.get_text(" "), colspan=_span(cell.get("colspan")), rowspan=_span(cell.get("rowspan")))
            for cell in row.find_all(["td", "th"], recursive=False)
            if isinstance(cell, Tag)
        ]
        for row in rows
    ]
    return markdown_table(span_grid(grid), caption=caption.get_text(" ") if caption else "")


def outer_html_tables(element) -> list:
    """The ``<table>`` elements under ``element`` that are not inside another table, in document
    order. Linear in the tree's size (no table's ancestors are searched)."""
    from bs4 import Tag

    tables, stack = [], [element]
    while stack:  # depth first, in document order
        node = stack.pop()
        if node is not element and node.name == "table":
            tables.append(node)
        else:
            stack.extend(reversed([child for child in node.children if isinstance(child, Tag)]))
    return tables


def _span(value) -> int:
    """An HTML ``colspan``/``rowspan`` attribute as a number (1 when missing or not a number)."""
    try:
        return int(str(value).strip()) if value is not None else 1
    except ValueError:
        return 1
