"""OpenDocument text (.odt, odfpy), read for ``knowledge.ingestion.office.read_office``.

``text:h`` elements are headings, ``text:p`` paragraphs; lists and sections are read for their
paragraphs; tracked changes and declarations are not text. Tables become Markdown tables
(``knowledge.ingestion.tables``) with their caption: the paragraph right before (else right
after) the table that holds a "Table" number sequence, as office programs write one. Repeated
cells and rows count as many times as they repeat (at most ``_MAX_REPEAT``); a cell spanning
rows is repeated in each (in its first column), the other positions it covers stay empty; a
table nested in a cell is flattened into that cell's text. Pictures (``draw:image`` in frames)
are read with OCR where they stand (``knowledge.ingestion.office_images``), and kept to be shown
with their caption: the paragraph around the picture's frame (a captioned frame's text box, as
LibreOffice writes one) or right after (else right before) its paragraph that holds a "Figure",
"Illustration" or "Drawing" number sequence.
"""

from __future__ import annotations

import io
import zipfile

from knowledge.ingestion.office_blocks import Block, Blocks, Parsed, first_heading, line
from knowledge.ingestion.office_images import ImageReader
from knowledge.ingestion.tables import markdown_table


def read_odt(data: bytes, blocks: Blocks, images: ImageReader) -> Parsed:
    from odf import dc
    from odf.opendocument import load

    document = load(io.BytesIO(data))
    if not document.mimetype.startswith("application/vnd.oasis.opendocument.text"):
        raise ValueError(f"not a text document: {document.mimetype}")
    with zipfile.ZipFile(io.BytesIO(data)) as archive:
        _odt_blocks(document.text, blocks, _OdtPictures(archive, images))
    titles = document.meta.getElementsByType(dc.Title)
    meta_title = _odt_text(titles[0]) if titles else ""
    return Parsed(meta_title, first_heading(blocks), metadata=images.metadata())


_TEXT_NS = "urn:oasis:names:tc:opendocument:xmlns:text:1.0"
_TABLE_NS = "urn:oasis:names:tc:opendocument:xmlns:table:1.0"
_DRAW_NS = "urn:oasis:names:tc:opendocument:xmlns:drawing:1.0"
_SVG_NS = "urn:oasis:names:tc:opendocument:xmlns:svg-compatible:1.0"
_XLINK_NS = "http://www.w3.org/1999/xlink"
# Declarations and change records, not text of the document.
_ODT_SKIPPED = {
    (_TEXT_NS, "tracked-changes"),
    (_TEXT_NS, "sequence-decls"),
    (_TEXT_NS, "variable-decls"),
    (_TEXT_NS, "user-field-decls"),
    ("urn:oasis:names:tc:opendocument:xmlns:office:1.0", "forms"),
}
# The number sequences of a figure's caption (LibreOffice's names, older ones too).
_FIGURE_SEQUENCES = ("figure", "illustration", "drawing")
# The most times one cell or row is repeated (``number-columns-repeated``, ``number-rows-repeated``).
_MAX_REPEAT = 1000


class _OdtPictures:
    """The pictures of an .odt (members of its zip, named by ``xlink:href``), read by ``images``."""

    def __init__(self, archive: zipfile.ZipFile, images: ImageReader):
        self.archive, self.images = archive, images
        self.members = set(archive.namelist())

    def blocks(self, element, *, caption: str = "") -> list[Block]:
        """The blocks of the pictures in ``element`` (``draw:image`` in frames), in order;
        ``caption``: the caption paragraph next to ``element``, for a picture without its own."""
        found = []
        for image in _odt_descendants(element, (_DRAW_NS, "image")):
            href = image.getAttrNS(_XLINK_NS, "href") or ""
            data = self.archive.read(href) if href in self.members else None
            own = _odt_frame_caption(image.parentNode, stop=element)
            block = self.images.block(data, alt=_odt_alt(image.parentNode), caption=own or caption)
            if block is not None:
                found.append(block)
        return found


def _odt_frame_caption(frame, *, stop) -> str:
    """The caption around a picture's ``frame``: the text of the nearest paragraph holding it
    (inside ``stop``) that holds a figure's number sequence, as a captioned frame's text box does."""
    node = getattr(frame, "parentNode", None)
    while node is not None and node is not stop.parentNode:
        if getattr(node, "qname", None) == (_TEXT_NS, "p") and _odt_is_caption(node, _FIGURE_SEQUENCES):
            return line(_odt_text(node, frames=False))
        node = getattr(node, "parentNode", None)
    return ""


def _odt_descendants(element, qname):
    """The descendants of ``element`` called ``qname``, in document order."""
    for child in element.childNodes:
        if child.nodeType == child.ELEMENT_NODE:
            if child.qname == qname:
                yield child
            yield from _odt_descendants(child, qname)


def _odt_alt(frame) -> str:
    """A frame's alternative text: its ``svg:title``, else its ``svg:desc``."""
    for name in ("title", "desc"):
        for child in getattr(frame, "childNodes", []):
            if child.nodeType == child.ELEMENT_NODE and child.qname == (_SVG_NS, name):
                return _odt_text(child)
    return ""


def _odt_blocks(element, blocks: list[Block], pictures: _OdtPictures) -> None:
    children = [
        child
        for child in element.childNodes
        if child.nodeType == child.ELEMENT_NODE and child.qname not in _ODT_SKIPPED
    ]
    captions = _odt_captions(children)
    caption_indexes = set(captions.values())
    for index, child in enumerate(children):
        if index in caption_indexes:
            continue  # a table's caption, written with its table
        if child.qname == (_TEXT_NS, "h"):
            blocks.append(Block(line(_odt_text(child)), heading=True))
        elif child.qname == (_TEXT_NS, "p"):
            blocks.append(Block(_odt_text(child)))
            blocks.extend(pictures.blocks(child, caption=_odt_picture_caption(children, index, caption_indexes)))
        elif child.qname == (_TABLE_NS, "table"):
            caption = _odt_text(children[captions[index]]) if index in captions else ""
            blocks.append(Block(markdown_table(_odt_grid(child), caption=caption)))
        elif child.qname == (_DRAW_NS, "frame"):
            blocks.extend(pictures.blocks(child))
        else:  # lists, list items, sections: their paragraphs count
            _odt_blocks(child, blocks, pictures)


def _odt_captions(children: list) -> dict[int, int]:
    """Table index -> the index of its caption: the paragraph right before it (else right after
    it) that holds a "Table" number sequence (``text:sequence``), as office programs write one."""
    captions: dict[int, int] = {}
    taken: set[int] = set()
    for index, child in enumerate(children):
        if child.qname != (_TABLE_NS, "table"):
            continue
        for candidate in (index - 1, index + 1):
            if 0 <= candidate < len(children) and candidate not in taken and _odt_is_caption(children[candidate]):
                captions[index] = candidate
                taken.add(candidate)
                break
    return captions


def _odt_picture_caption(children: list, index: int, taken: set[int]) -> str:
    """The caption of the pictures of paragraph ``index``: the paragraph right after it (else
    right before it) that holds a figure's number sequence and is no table's caption."""
    for candidate in (index + 1, index - 1):
        if 0 <= candidate < len(children) and candidate not in taken:
            if _odt_is_caption(children[candidate], _FIGURE_SEQUENCES):
                return line(_odt_text(children[candidate], frames=False))
    return ""


def _odt_is_caption(element, names: tuple[str, ...] = ("table",)) -> bool:
    """Whether ``element`` is a paragraph holding a number sequence named one of ``names``."""
    if element.qname != (_TEXT_NS, "p"):
        return False
    return any(
        (sequence.getAttrNS(_TEXT_NS, "name") or "").lower() in names
        for sequence in _odt_descendants(element, (_TEXT_NS, "sequence"))
    )


def _odt_rows(element):
    """The table's rows, inside header-row and row groups too, but not those of nested tables."""
    for child in element.childNodes:
        if child.nodeType != child.ELEMENT_NODE:
            continue
        if child.qname == (_TABLE_NS, "table-row"):
            yield child
        elif child.qname in {
            (_TABLE_NS, "table-header-rows"),
            (_TABLE_NS, "table-rows"),
            (_TABLE_NS, "table-row-group"),
        }:
            yield from _odt_rows(child)


def _odt_grid(table) -> list[list[str]]:
    """A table's rows of cell texts: repeated cells and rows as many times as they repeat (at
    most ``_MAX_REPEAT``); a cell spanning rows in each row it covers (its first column), the
    other positions it covers (``table:covered-table-cell``) empty."""
    grid: list[list[str]] = []
    spanning: dict[int, tuple[str, int]] = {}  # column -> (text, the last row it covers)
    for row in _odt_rows(table):
        cells: list[str] = []
        for cell in row.childNodes:
            if cell.nodeType != cell.ELEMENT_NODE or cell.qname[0] != _TABLE_NS:
                continue
            covered = cell.qname[1] == "covered-table-cell"
            if not covered and cell.qname[1] != "table-cell":
                continue
            text = "" if covered else _odt_cell_text(cell)
            rowspan = _odt_number(cell, "number-rows-spanned")
            for _ in range(_odt_number(cell, "number-columns-repeated")):
                column = len(cells)
                if covered:
                    above, last = spanning.get(column, ("", -1))
                    cells.append(above if last >= len(grid) else "")
                    continue
                cells.append(text)
                if rowspan > 1:
                    spanning[column] = (text, len(grid) + rowspan - 1)
        grid.extend([cells] * _odt_number(row, "number-rows-repeated"))
    return grid


def _odt_number(element, attribute: str) -> int:
    """A repeat or span count of ``element`` (a ``table:`` attribute), in [1, ``_MAX_REPEAT``]."""
    return _odt_count(element.getAttrNS(_TABLE_NS, attribute), most=_MAX_REPEAT)


def _odt_count(value, *, most: int) -> int:
    """A count attribute's ``value`` in [1, ``most``] (1 when missing or not a number)."""
    try:
        return max(1, min(int(value or 1), most))
    except ValueError:
        return 1


def _odt_cell_text(cell) -> str:
    """A cell's paragraphs and the cells of tables nested in it, in order, as one text."""
    parts = []
    for part in cell.childNodes:
        if part.nodeType != part.ELEMENT_NODE:
            continue
        if part.qname == (_TABLE_NS, "table"):
            parts.extend(text for row in _odt_grid(part) for text in row if text)
        else:
            parts.append(_odt_text(part))
    return " ".join(parts)


# What is not text of a paragraph: a picture's title and description (its alternative text).
_NOT_TEXT = {(_SVG_NS, "title"), (_SVG_NS, "desc")}
# The most spaces one ``text:s`` stands for.
_MAX_SPACES = 100


def _odt_text(element, *, frames: bool = True) -> str:
    """The text of ``element`` as odfpy's ``teletype.extractText`` gives it (``text:s``,
    ``text:tab`` and ``text:line-break`` as whitespace), without pictures' alternative text and
    with at most ``_MAX_SPACES`` spaces per ``text:s``; without ``frames``, without the text of
    the frames it holds either (a caption's own text)."""
    parts = []
    for child in element.childNodes:
        if child.nodeType == child.TEXT_NODE:
            parts.append(child.data)
        elif child.nodeType != child.ELEMENT_NODE or child.qname in _NOT_TEXT:
            continue
        elif not frames and child.qname == (_DRAW_NS, "frame"):
            continue
        elif child.qname == (_TEXT_NS, "line-break"):
            parts.append("\n")
        elif child.qname == (_TEXT_NS, "tab"):
            parts.append("\t")
        elif child.qname == (_TEXT_NS, "s"):
            parts.append(" " * _odt_count(child.getAttrNS(_TEXT_NS, "c"), most=_MAX_SPACES))
        else:
            parts.append(_odt_text(child, frames=frames))
    return "".join(parts)
