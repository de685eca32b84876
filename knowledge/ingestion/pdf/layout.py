"""Reading order on one page: words (and whole tables and pictures) with their boxes become lines,
column by column.

Coordinates are PDF points from the page's top-left corner (pdfplumber's ``x0``, ``top``, ``x1``,
``bottom``). The steps:

1. ``rows``: items grouped into rows, top to bottom; a word joins a row when its vertical middle
   lies within the row's height. A table or a picture is a row of its own.
2. ``gutter``: a vertical strip (at least ``MIN_GUTTER_PT`` wide, in the middle half of the
   region) crossed by at most ``MAX_CROSSING_SHARE`` of the rows (titles, full-width figures),
   with text on both sides in at least a quarter of the other rows, and prose there (a median
   of ``MIN_COLUMN_WORDS`` words per row on each side), so a borderless table or a form of
   "label  value" pairs is read row by row, not column by column.
3. ``reading_order``: where there is a gutter, the rows between two rows that cross it (a band)
   are read left side first, then right side, each side ordered the same way again (three or
   four columns), and a row that crosses the gutter after the band above it.
4. each row part becomes a ``Line`` (its items left to right) that starts a paragraph when it
   begins a column, follows a table or a picture, or when its gap to the line above passes the
   page's usual gap between lines by more than ``PARAGRAPH_GAP`` of a line's height.

Costs: linear in the words and the page's width in points (the crossings are counted with a
difference array, one cell per point), so a dense page costs about a millisecond here.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from statistics import median

# The narrowest gap between two columns, in points (word spaces are 2-4 points).
MIN_GUTTER_PT = 6.0
# The most rows that may cross a gutter (headings and pictures that span the columns).
MAX_CROSSING_SHARE = 0.2
# The fewest rows a page (or a column) needs before it is looked at for columns.
MIN_ROWS_FOR_COLUMNS = 6
# Columns of prose have words: the median words per row on each side of a gutter.
MIN_COLUMN_WORDS = 3
# Narrower regions are not split into columns (points: two inches).
MIN_REGION_PT = 144.0
# Columns within columns, at most (three or four columns on a page).
MAX_DEPTH = 3
# A gap this share of a line's height larger than the usual one starts a paragraph.
PARAGRAPH_GAP = 0.6
# Gaps between lines up to this share of a line's height are leading (the lines of a paragraph).
LEADING_GAP = 1.5


@dataclass
class Item:
    """Something on a page: a word (``ref`` None), or a whole table or picture (``ref`` is it)."""

    text: str
    x0: float
    top: float
    x1: float
    bottom: float
    ref: object = None


@dataclass
class Line:
    """A line in reading order: its items left to right; ``paragraph`` when a blank line goes before it."""

    items: list[Item]
    paragraph: bool = False
    box: tuple[float, float, float, float] = field(init=False)

    def __post_init__(self):
        self.box = (
            min(i.x0 for i in self.items),
            min(i.top for i in self.items),
            max(i.x1 for i in self.items),
            max(i.bottom for i in self.items),
        )

    @property
    def ref(self) -> object:
        """The table or picture this line is, or None for a line of words."""
        return self.items[0].ref if len(self.items) == 1 else None

    @property
    def text(self) -> str:
        return " ".join(item.text for item in self.items)


Row = list[Item]


def rows(items: list[Item]) -> list[Row]:
    """``items`` grouped into rows, top to bottom (a table or a picture alone in its row)."""
    grouped: list[Row] = []
    band = (0.0, -1.0)
    for item in sorted(items, key=lambda i: (i.top, i.x0)):
        middle = (item.top + item.bottom) / 2
        last = grouped[-1] if grouped else None
        if item.ref is None and last and last[0].ref is None and band[0] <= middle <= band[1]:
            last.append(item)
            band = (min(band[0], item.top), max(band[1], item.bottom))
        else:
            grouped.append([item])
            band = (item.top, item.bottom)
    return grouped


def gutter(grouped: list[Row], x0: float, x1: float) -> tuple[float, float] | None:
    """The strip (left, right) between two columns of the region ``x0``-``x1``, or None."""
    if len(grouped) < MIN_ROWS_FOR_COLUMNS or x1 - x0 < MIN_REGION_PT:
        return None
    crossings = _crossings(grouped, x0, x1)
    low, high = int(0.25 * (x1 - x0)), int(0.75 * (x1 - x0))
    fewest = min(crossings[low : high + 1])
    if fewest > MAX_CROSSING_SHARE * len(grouped):
        return None
    best = None
    position = low
    while position <= high:  # the widest run of ``fewest`` crossings that starts in the middle half
        if crossings[position] != fewest:
            position += 1
            continue
        end = position
        while end + 1 < len(crossings) and crossings[end + 1] == fewest:
            end += 1
        if best is None or end - position > best[1] - best[0]:
            best = (position, end)
        position = end + 1
    left, right = x0 + best[0], x0 + best[1] + 1
    if right - left < MIN_GUTTER_PT or not _columns_on_both_sides(grouped, left, right):
        return None
    return left, right


def _crossings(grouped: list[Row], x0: float, x1: float) -> list[int]:
    """For each point from ``x0`` to ``x1``, how many rows have an item over it."""
    width = max(int(x1 - x0) + 2, 2)
    delta = [0] * (width + 1)
    for row in grouped:
        spans = sorted((max(0, int(i.x0 - x0)), min(width - 1, int(i.x1 - x0) + 1)) for i in row)
        start, end = spans[0]
        for a, b in spans[1:] + [(width, width)]:
            if a > end:
                delta[start] += 1
                delta[end] -= 1
                start, end = a, b
            else:
                end = max(end, b)
    counts, running = [], 0
    for change in delta[:width]:
        running += change
        counts.append(running)
    return counts


def _columns_on_both_sides(grouped: list[Row], left: float, right: float) -> bool:
    """Whether the rows have prose on both sides of the strip: text left of it and right of it in a
    quarter of the rows that do not cross it (at least three), a median of ``MIN_COLUMN_WORDS``
    words per row on each side."""
    left_words, right_words = [], []
    for row in grouped:
        if _crosses(row, left, right):
            continue
        on_left = sum(1 for i in row if i.x1 <= left)
        on_right = sum(1 for i in row if i.x0 >= right)
        if on_left:
            left_words.append(on_left)
        if on_right:
            right_words.append(on_right)
    needed = max(3, (len(left_words) + len(right_words)) / 4)
    if min(len(left_words), len(right_words)) < needed:
        return False
    return median(left_words) >= MIN_COLUMN_WORDS and median(right_words) >= MIN_COLUMN_WORDS


def _crosses(row: Row, left: float, right: float) -> bool:
    return any(i.x0 < right and i.x1 > left for i in row)


def reading_order(items: list[Item], x0: float, x1: float) -> list[Line]:
    """The lines of ``items`` (all within ``x0``-``x1``) in reading order, paragraphs marked."""
    lines = [Line(sorted(row, key=lambda i: i.x0)) for row in _order(rows(items), x0, x1, depth=0)]
    spacing = _line_spacing(lines)
    for index, line in enumerate(lines):
        line.paragraph = index == 0 or _starts_paragraph(lines[index - 1], line, spacing)
    return lines


def _order(grouped: list[Row], x0: float, x1: float, *, depth: int) -> list[Row]:
    strip = gutter(grouped, x0, x1) if depth < MAX_DEPTH else None
    if strip is None:
        return grouped
    left, right = strip
    ordered: list[Row] = []
    band: list[Row] = []
    for row in grouped:
        if _crosses(row, left, right):
            ordered += _band(band, x0, left, right, x1, depth) + [row]
            band = []
        else:
            band.append(row)
    return ordered + _band(band, x0, left, right, x1, depth)


def _band(band: list[Row], x0: float, left: float, right: float, x1: float, depth: int) -> list[Row]:
    """The rows of a band between rows that cross the gutter: the left side, then the right."""
    left_rows = [part for part in ([i for i in row if i.x1 <= left] for row in band) if part]
    right_rows = [part for part in ([i for i in row if i.x0 >= right] for row in band) if part]
    return _order(left_rows, x0, left, depth=depth + 1) + _order(right_rows, right, x1, depth=depth + 1)


def _line_spacing(lines: list[Line]) -> float:
    """The usual gap (points) between a line of words and the next one below it in a column: the
    median of the gaps smaller than ``LEADING_GAP`` of a line's height (0 when there are none)."""
    gaps = []
    for above, line in zip(lines, lines[1:], strict=False):
        gap = line.box[1] - above.box[3]
        height = max(above.box[3] - above.box[1], line.box[3] - line.box[1], 1.0)
        if above.ref is None and line.ref is None and line.box[1] >= above.box[1] and gap < LEADING_GAP * height:
            gaps.append(gap)
    return median(gaps) if gaps else 0.0


def _starts_paragraph(above: Line, line: Line, spacing: float) -> bool:
    """A line starts a paragraph after a table or picture, as one, at the top of a column (it
    stands higher than the line before it), or when its gap to the line above passes the usual
    ``spacing`` by more than ``PARAGRAPH_GAP`` of a line's height."""
    if above.ref is not None or line.ref is not None:
        return True
    if line.box[1] < above.box[1] - 1:
        return True
    height = max(above.box[3] - above.box[1], line.box[3] - line.box[1], 1.0)
    return line.box[1] - above.box[3] > max(spacing, 0.0) + PARAGRAPH_GAP * height
