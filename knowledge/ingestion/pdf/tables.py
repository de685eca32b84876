"""Tables of a PDF page, found by pdfplumber's table finder, as Markdown rows.

pdfplumber finds a table from the lines drawn on the page (its default "lines" strategy): ruled
tables, and tables whose rows or cells have drawn borders or backgrounds. A table drawn without
any lines (columns aligned by spaces only) is not found; its rows are read as lines of text, the
cells of a row on one line in order. The other strategies, tried on the samples of
``tests/knowledge/pdf_samples.py``: "text" for both directions takes every page of prose for a
table (the two-column page for one of 29 rows by 23 columns, words cut apart); "text" rows
within "lines" columns finds the ruled tables with extra rows (9 rows for a table of 5). The
default, "lines" both ways, finds the ruled tables exactly and nothing on the pages of prose.

The Markdown shape is ``knowledge.ingestion.tables``' (the splitter finds tables by it): a header
row, a ``| --- |`` separator, one line per row, cells cleaned by ``cell_text``. A table found
with fewer than two columns is a box around text, read as text. A table that continues the
previous page's (``continues``) is written as more rows of that table, without a header.
"""

from __future__ import annotations

from dataclasses import dataclass

from knowledge.ingestion.tables import cell_text

# How far (points) a continued table's column edges may stand from the first part's.
COLUMN_TOLERANCE_PT = 4.0


@dataclass
class PdfTable:
    """A table on one page: its rows of cleaned cell text, each row's box, its column edges (x of
    each column's left side, then the table's right side) and its box; ``continued`` when it
    carries on the table of the page before (then it has no header, and ``header`` is the header
    of the table it continues)."""

    rows: list[list[str]]
    row_boxes: list[tuple[float, float, float, float]]
    edges: list[float]
    box: tuple[float, float, float, float]
    continued: bool = False
    header: list[str] | None = None

    @property
    def width(self) -> int:
        return len(self.edges) - 1


def page_tables(page) -> list[PdfTable]:
    """The tables of ``page`` (a pdfplumber page) with two columns or more and a row with text."""
    tables = []
    for found in page.find_tables():
        extracted = found.extract()
        rows, boxes = [], []
        for cells, row in zip(extracted, found.rows, strict=False):
            cleaned = [cell_text(cell or "") for cell in cells]
            if any(cleaned):
                rows.append(cleaned)
                boxes.append(tuple(row.bbox))
        edges = sorted({round(column.bbox[0], 1) for column in found.columns} | {round(found.bbox[2], 1)})
        if rows and len(edges) >= 3 and len(rows[0]) == len(edges) - 1:
            tables.append(PdfTable(rows=rows, row_boxes=boxes, edges=edges, box=tuple(found.bbox)))
    return tables


def continues(table: PdfTable, previous: PdfTable) -> bool:
    """Whether ``table`` (first on its page) carries on ``previous`` (last on the page before):
    the same number of columns, at the same places."""
    return table.width == previous.width and all(
        abs(a - b) <= COLUMN_TOLERANCE_PT for a, b in zip(table.edges, previous.edges, strict=True)
    )


def row_line(cells: list[str]) -> str:
    """One Markdown table row: ``| a | b |`` (an empty cell ``| |``)."""
    return "|" + "|".join(f" {cell} " if cell else " " for cell in cells) + "|"


def separator_line(width: int) -> str:
    return row_line(["---"] * width)
