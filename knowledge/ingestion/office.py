"""Office and e-book readers: .docx (python-docx), .pptx (python-pptx), .xlsx (openpyxl), .odt
(odfpy) and .epub (ebooklib and BeautifulSoup), called by ``readers.read_bytes``.

Each format becomes a list of blocks, headings and text, in reading order; the blocks are
joined by blank lines, normalized with ``normalize_text`` and the headings located in the result
(``locate_sections``), as the Markdown and reST readers do. What becomes a heading:

* .docx: paragraphs styled "Title" or "Heading 1" to "Heading 9";
* .pptx: each slide, as "Slide 3: <its title>" ("Slide 3" when it has none);
* .xlsx: each sheet, by its name;
* .odt: ``text:h`` elements;
* .epub: each chapter (its table-of-contents entry when it does not open with a heading) and
  its ``h1``-``h6``.

Tables become one line per row, cells joined by " | "; fully empty rows are left out. The
title is the document's own (core properties, EPUB or ODF metadata), else the first heading
(the first slide's title for .pptx), else the file name without its suffix; a workbook's sheet
names are not taken for its title.

Damaged, encrypted (password-protected OOXML files are OLE compound files, not zip files) and
mislabelled files raise ``InvalidInput`` naming the file; no library error gets out.

Caps (``office_check``, run in the web request and again before a library opens the file): the
zip directory's declared sizes against ``KB_PARSE_MAX_UNPACKED_MB`` (all members together) and
``KB_PARSE_MAX_RATIO`` (the whole archive, and each member over 1 MiB: small, highly
compressible parts of real files pass), and at most ``MAX_ZIP_MEMBERS`` members: code
``archive_bomb``. Python's ``zipfile``, which every library here reads through, stops a member at
its declared size (and fails its CRC), so a directory that lies about sizes gains nothing. The
text is counted while the blocks are collected: past ``KB_PARSE_MAX_CHARS`` characters,
``document_too_large``. The libraries themselves run in the sandbox's child process
(``knowledge.ingestion.sandbox``).

XML: the libraries never resolve entities. python-docx, python-pptx and ebooklib parse with lxml
parsers made with ``resolve_entities=False`` (and lxml's default ``huge_tree=False``, no network);
odfpy parses with ``defusedxml.sax``; openpyxl uses ``defusedxml`` when it is installed (a direct
requirement). The two XML files read here (an ODF manifest, EPUB's ``encryption.xml``) are parsed
with ``defusedxml``, at most ``_MAX_XML_READ`` bytes of each.
"""

from __future__ import annotations

import io
import logging
import re
import warnings
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from datetime import date, datetime, time
from pathlib import Path

from django.conf import settings

from core.errors import InvalidInput
from core.uploads import size_text
from knowledge.ingestion.documents import ReadDocument, locate_sections, normalize_text

logger = logging.getLogger(__name__)

# Encrypted OOXML files (and the old binary .doc/.xls/.ppt) are OLE compound files.
OLE_SIGNATURE = b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1"
# An encrypted OOXML file keeps the package in this stream (its name is UTF-16 in the directory).
_ENCRYPTED_PACKAGE = "EncryptedPackage".encode("utf-16-le")
# A zip's central directory entry starts with this; counted before ``zipfile`` lists the members.
_ZIP_DIRECTORY_ENTRY = b"PK\x01\x02"
# Members of one file: real documents have tens to a few thousand (an EPUB's images).
MAX_ZIP_MEMBERS = 10_000
# Members this small pass the ratio cap: small, highly compressible parts of real files.
RATIO_EXEMPT_BYTES = 2**20
# The most read of an XML file checked here (an ODF manifest, EPUB's encryption.xml).
_MAX_XML_READ = 4 * 2**20
# What each reader imports (``readers`` loads them before forking its sandbox).
OFFICE_READER_MODULES = {
    ".docx": ("docx",),
    ".pptx": ("pptx",),
    ".xlsx": ("openpyxl",),
    ".odt": ("odf.opendocument", "odf.teletype", "odf.dc"),
    ".epub": ("ebooklib.epub", "bs4"),
}

_KINDS = {
    ".docx": "Word document",
    ".pptx": "PowerPoint presentation",
    ".xlsx": "Excel workbook",
    ".odt": "OpenDocument text",
    ".epub": "EPUB book",
}
_OLD_BINARY = {".docx": ".doc", ".pptx": ".ppt", ".xlsx": ".xls"}
# Titles that programs write for every file: not worth more than the file name.
_PLACEHOLDER_TITLES = {"powerpoint presentation", "presentation", "document", "untitled"}


@dataclass
class Block:
    """A heading or a piece of text, in reading order."""

    text: str
    heading: bool = False


class _Blocks(list):
    """The blocks of a document, counting their characters as they come: ``document_too_large``
    as soon as they pass ``limit`` (``KB_PARSE_MAX_CHARS``)."""

    def __init__(self, *, name: str, limit: int):
        super().__init__()
        self.name, self.limit, self.chars = name, limit, 0

    def check(self, pending: int) -> None:
        """Raise ``document_too_large`` if the blocks so far and ``pending`` more characters pass the limit."""
        if self.chars + pending > self.limit:
            raise InvalidInput(
                f"{self.name}: the file holds more than {self.limit:,} characters of text, the limit; "
                "split it into smaller files.",
                code="document_too_large",
            )

    def _count(self, blocks) -> list[Block]:
        blocks = list(blocks)
        added = sum(len(block.text) for block in blocks)
        self.check(added)
        self.chars += added
        return blocks

    def append(self, block: Block) -> None:
        super().extend(self._count([block]))

    def insert(self, index: int, block: Block) -> None:
        super().insert(index, *self._count([block]))

    def extend(self, blocks) -> None:
        super().extend(self._count(blocks))

    def __iadd__(self, blocks):
        self.extend(blocks)
        return self


def read_office(data: bytes, *, name: str, external_id: str, uri: str) -> ReadDocument:
    """Read a .docx, .pptx, .xlsx, .odt or .epub file ``name`` from ``data``.

    Returns one ``ReadDocument`` (its text may be empty: ``read_bytes`` refuses that). Raises
    ``InvalidInput`` for an empty, damaged, encrypted or mislabelled file, naming it.
    """
    suffix = Path(name).suffix.lower()
    office_check(data, name=name)
    reader = _READERS[suffix]
    blocks = _Blocks(name=name, limit=settings.KB_PARSE_MAX_CHARS)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # libraries warn about odd but readable files
            meta_title, first_heading = reader(data, blocks)
    except InvalidInput:
        raise
    except MemoryError:
        raise
    except Exception:  # each library has its own zoo of errors for a bad file
        logger.info("Could not read %s as %s", name, _KINDS[suffix], exc_info=True)
        raise _invalid(name, suffix) from None
    return _document(
        blocks, meta_title=meta_title, first_heading=first_heading, name=name, external_id=external_id, uri=uri
    )


def office_check(data: bytes, *, name: str) -> None:
    """The checks that need no library, cheap enough for a web request: the file is a zip (not
    an encrypted or old binary office file), of at most ``MAX_ZIP_MEMBERS`` members, whose declared
    sizes pass the caps (``KB_PARSE_MAX_UNPACKED_MB``, ``KB_PARSE_MAX_RATIO``), and not encrypted.

    Raises ``InvalidInput`` naming the file: ``empty_file``, ``encrypted_file``,
    ``invalid_document`` or ``archive_bomb``.
    """
    suffix = Path(name).suffix.lower()
    if not data:
        raise InvalidInput(f"{name}: the file is empty.", code="empty_file")
    _check_container(data, name=name, suffix=suffix)


def _check_container(data: bytes, *, name: str, suffix: str) -> None:
    """Refuse encrypted, old binary, non-zip and oversized files before a library sees them."""
    if data.startswith(OLE_SIGNATURE) and suffix in _OLD_BINARY:  # ODF and EPUB stay zip files
        if _ENCRYPTED_PACKAGE in data:
            raise InvalidInput(
                f"{name}: the file is encrypted (password-protected); save it without a password.",
                code="encrypted_file",
            )
        raise InvalidInput(
            f"{name}: an old binary {_OLD_BINARY[suffix]} file, not {suffix}; save it as {suffix}.",
            code="invalid_document",
        )
    if data.count(_ZIP_DIRECTORY_ENTRY) > MAX_ZIP_MEMBERS:
        raise InvalidInput(
            f"{name}: the file holds more than {MAX_ZIP_MEMBERS:,} parts; the file may be built to exhaust the server.",
            code="archive_bomb",
        )
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as archive:
            _check_sizes(archive.infolist(), name=name)
            if suffix in (".odt", ".epub") and _odf_or_epub_encrypted(archive, suffix):
                raise InvalidInput(
                    f"{name}: the file is encrypted (password-protected or DRM); save or export it without protection.",
                    code="encrypted_file",
                )
    except InvalidInput:
        raise
    except Exception:  # not a zip file, or a damaged one (bad offsets, CRC, compression)
        raise _invalid(name, suffix) from None


def _check_sizes(members: list[zipfile.ZipInfo], *, name: str) -> None:
    """The declared sizes against the caps: ``archive_bomb`` naming the file and the limit."""
    max_unpacked_mb, max_ratio = settings.KB_PARSE_MAX_UNPACKED_MB, settings.KB_PARSE_MAX_RATIO
    unpacked = sum(member.file_size for member in members)
    packed = sum(member.compress_size for member in members)
    if unpacked > max_unpacked_mb * 2**20:
        raise InvalidInput(
            f"{name}: the file unpacks to {size_text(unpacked)}, more than the limit of "
            f"{size_text(int(max_unpacked_mb * 2**20))}; split it into smaller files.",
            code="archive_bomb",
        )
    for what, size, compressed in [
        ("the file", unpacked, packed),
        *((f"its part {m.filename!r}", m.file_size, m.compress_size) for m in members),
    ]:
        if size > RATIO_EXEMPT_BYTES and size > max(compressed, 1) * max_ratio:
            raise InvalidInput(
                f"{name}: {what} unpacks to {size // max(compressed, 1):,} times its compressed size "
                f"({size_text(size)}); the limit is {max_ratio} times. The file may be built to exhaust the server.",
                code="archive_bomb",
            )


def _invalid(name: str, suffix: str) -> InvalidInput:
    return InvalidInput(
        f"{name}: not a valid {_KINDS[suffix]} (the file is damaged or is not {suffix}).", code="invalid_document"
    )


_ODF_MANIFEST_NS = "urn:oasis:names:tc:opendocument:xmlns:manifest:1.0"
_XMLENC_NS = "http://www.w3.org/2001/04/xmlenc#"


def _odf_or_epub_encrypted(archive: zipfile.ZipFile, suffix: str) -> bool:
    """ODF lists encrypted members in its manifest; EPUB DRM lists encrypted chapters in encryption.xml."""
    names = set(archive.namelist())
    if suffix == ".odt":
        if "META-INF/manifest.xml" not in names:
            return False
        manifest = _xml(archive, "META-INF/manifest.xml")
        return manifest.find(f".//{{{_ODF_MANIFEST_NS}}}encryption-data") is not None
    if "META-INF/encryption.xml" not in names:
        return False
    # Font obfuscation also uses encryption.xml; only encrypted chapters make a book unreadable.
    encryption = _xml(archive, "META-INF/encryption.xml")
    targets = [ref.get("URI", "") for ref in encryption.iter(f"{{{_XMLENC_NS}}}CipherReference")]
    return any(target.lower().endswith((".xhtml", ".html", ".htm")) for target in targets)


def _xml(archive: zipfile.ZipFile, member: str):
    """The root element of an XML member, parsed with ``defusedxml`` (no entities, no DTD
    retrieval), from at most ``_MAX_XML_READ`` bytes."""
    from defusedxml.ElementTree import fromstring

    with archive.open(member) as file:
        data = file.read(_MAX_XML_READ + 1)
    if len(data) > _MAX_XML_READ:
        raise ValueError(f"{member} is larger than {_MAX_XML_READ} bytes")
    return fromstring(data)


def _document(
    blocks: list[Block], *, meta_title: str, first_heading: str, name: str, external_id: str, uri: str
) -> ReadDocument:
    """Join the blocks into the normalized text and locate their headings in it."""
    text = normalize_text("\n\n".join(block.text for block in blocks if block.text))
    headings = [block.text for block in blocks if block.heading and block.text]
    meta_title = _line(meta_title or "")
    if meta_title.lower() in _PLACEHOLDER_TITLES:
        meta_title = ""
    title = meta_title or first_heading or Path(name).stem
    return ReadDocument(
        external_id=external_id,
        uri=uri,
        title=title[:500],
        text=text,
        sections=locate_sections(text, headings, whole_lines=True),
    )


def _line(text: str) -> str:
    """``text`` on one line: runs of whitespace become one space, normalized like the document text."""
    return normalize_text(" ".join(str(text).split()))


def _row(cells: list[str]) -> str:
    """A row of one-line cells as one line, joined by " | " without trailing empty cells."""
    cells = list(cells)
    while cells and not cells[-1]:
        cells.pop()
    return " | ".join(cells)


def _table(rows: list[list[str]]) -> Block:
    """A table as one block: a line per row that has any text, leading empty columns left out."""
    # Whitespace only: the whole text is normalized afterwards (normalizing every cell is slow).
    rows = [[" ".join(str(cell).split()) for cell in row] for row in rows]
    rows = [row for row in rows if any(row)]
    first = min((next(i for i, cell in enumerate(row) if cell) for row in rows), default=0)
    return Block("\n".join(_row(row[first:]) for row in rows))


# Each reader fills the blocks it is given and returns (metadata title, first heading for the title).
Parsed = tuple[str, str]


def _read_docx(data: bytes, blocks: _Blocks) -> Parsed:
    import docx
    from docx.table import Table

    document = docx.Document(io.BytesIO(data))
    # Style id -> name: ``paragraph.style`` searches the style sheet on every call.
    style_names: dict[str | None, str] = {}
    for item in document.iter_inner_content():
        if isinstance(item, Table):
            blocks.append(_docx_table(item))
            continue
        style_id = item._p.style
        if style_id not in style_names:
            style_names[style_id] = (item.style.name if item.style is not None else "") or ""
        style = style_names[style_id]
        if style == "Title" or re.fullmatch(r"Heading [1-9]", style):
            blocks.append(Block(_line(item.text), heading=True))
        else:
            blocks.append(Block(item.text))
    first_heading = next((block.text for block in blocks if block.heading and block.text), "")
    return document.core_properties.title or "", first_heading


def _docx_table(table) -> Block:
    rows = []
    for row in table.rows:
        cells, seen = [], set()
        for cell in row.cells:  # a merged cell comes once per grid column it spans
            if id(cell._tc) not in seen:
                seen.add(id(cell._tc))
                cells.append(cell.text)
        rows.append(cells)
    return _table(rows)


def _read_pptx(data: bytes, blocks: _Blocks) -> Parsed:
    from pptx import Presentation

    presentation = Presentation(io.BytesIO(data))
    first_title = ""
    for number, slide in enumerate(presentation.slides, start=1):
        title_shape = slide.shapes.title
        title = _line(title_shape.text_frame.text) if title_shape is not None and title_shape.has_text_frame else ""
        body: list[Block] = []
        for shape in slide.shapes:
            if title_shape is None or shape.shape_id != title_shape.shape_id:
                body.extend(_pptx_shape(shape))
        if slide.has_notes_slide and slide.notes_slide.notes_text_frame is not None:
            body.append(Block(_pptx_text(slide.notes_slide.notes_text_frame)))
        if not title and not any(block.text.strip() for block in body):
            continue  # a slide without text adds nothing to search
        first_title = first_title or title
        blocks.append(Block(f"Slide {number}: {title}" if title else f"Slide {number}", heading=True))
        blocks.extend(body)
    return presentation.core_properties.title or "", first_title


def _pptx_shape(shape) -> list[Block]:
    from pptx.shapes.group import GroupShape

    if isinstance(shape, GroupShape):
        return [block for child in shape.shapes for block in _pptx_shape(child)]
    if shape.has_table:
        return [_table([[cell.text for cell in row.cells if not cell.is_spanned] for row in shape.table.rows])]
    if shape.has_text_frame:
        return [Block(_pptx_text(shape.text_frame))]
    return []


def _pptx_text(frame) -> str:
    return frame.text.replace("\v", "\n")  # python-pptx gives a line break as a vertical tab


def _read_xlsx(data: bytes, blocks: _Blocks) -> Parsed:
    import openpyxl

    workbook = openpyxl.load_workbook(io.BytesIO(data), read_only=True, data_only=True)
    try:
        for sheet in workbook.worksheets:
            sheet.reset_dimensions()  # the stored dimensions may be wrong; read every row there is
            rows, pending = [], 0
            for row in sheet.iter_rows(values_only=True):  # a sheet streams: count it row by row
                rows.append([_cell_text(value) for value in row])
                pending += sum(len(cell) for cell in rows[-1])
                blocks.check(pending)
            table = _table(rows)
            if table.text:
                blocks += [Block(_line(sheet.title), heading=True), table]
        return workbook.properties.title or "", ""
    finally:
        workbook.close()


def _cell_text(value) -> str:
    """A cell value written plainly: dates in ISO 8601, whole numbers without ".0", TRUE/FALSE."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return "TRUE" if value else "FALSE"
    if isinstance(value, datetime):
        return value.date().isoformat() if value.time() == time() else value.isoformat(timespec="seconds")
    if isinstance(value, date):
        return value.isoformat()
    if isinstance(value, time):
        return value.isoformat(timespec="seconds")
    if isinstance(value, float) and value.is_integer() and abs(value) < 1e15:
        return str(int(value))
    return str(value)


def _read_odt(data: bytes, blocks: _Blocks) -> Parsed:
    from odf import dc, teletype
    from odf.opendocument import load

    document = load(io.BytesIO(data))
    if not document.mimetype.startswith("application/vnd.oasis.opendocument.text"):
        raise ValueError(f"not a text document: {document.mimetype}")
    _odt_blocks(document.text, blocks)
    titles = document.meta.getElementsByType(dc.Title)
    meta_title = teletype.extractText(titles[0]) if titles else ""
    first_heading = next((block.text for block in blocks if block.heading and block.text), "")
    return meta_title, first_heading


_TEXT_NS = "urn:oasis:names:tc:opendocument:xmlns:text:1.0"
_TABLE_NS = "urn:oasis:names:tc:opendocument:xmlns:table:1.0"
# Declarations and change records, not text of the document.
_ODT_SKIPPED = {
    (_TEXT_NS, "tracked-changes"),
    (_TEXT_NS, "sequence-decls"),
    (_TEXT_NS, "variable-decls"),
    (_TEXT_NS, "user-field-decls"),
    ("urn:oasis:names:tc:opendocument:xmlns:office:1.0", "forms"),
}


def _odt_blocks(element, blocks: list[Block]) -> None:
    from odf import teletype

    for child in element.childNodes:
        if child.nodeType != child.ELEMENT_NODE or child.qname in _ODT_SKIPPED:
            continue
        if child.qname == (_TEXT_NS, "h"):
            blocks.append(Block(_line(teletype.extractText(child)), heading=True))
        elif child.qname == (_TEXT_NS, "p"):
            blocks.append(Block(teletype.extractText(child)))
        elif child.qname == (_TABLE_NS, "table"):
            blocks.append(_table([_odt_cells(row) for row in _odt_rows(child)]))
        else:  # lists, list items, sections: their paragraphs count
            _odt_blocks(child, blocks)


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


def _odt_cells(row) -> list[str]:
    from odf import teletype

    return [
        " ".join(teletype.extractText(part) for part in cell.childNodes if part.nodeType == part.ELEMENT_NODE)
        for cell in row.childNodes
        if cell.nodeType == cell.ELEMENT_NODE and cell.qname == (_TABLE_NS, "table-cell")
    ]


def _read_epub(data: bytes, blocks: _Blocks) -> Parsed:
    import ebooklib
    from bs4 import BeautifulSoup
    from ebooklib import epub

    book = epub.read_epub(io.BytesIO(data), options={"ignore_ncx": True})
    toc_titles: dict[str, str] = {}
    _epub_toc(book.toc, toc_titles)
    for item_id, _linear in book.spine:
        item = book.get_item_with_id(item_id)
        if item is None or item.get_type() != ebooklib.ITEM_DOCUMENT or isinstance(item, epub.EpubNav):
            continue
        soup = BeautifulSoup(item.get_content(), "html.parser")
        chapter: list[Block] = []
        _html_blocks(soup.body or soup, chapter)
        if not any(block.text for block in chapter):
            continue
        if not chapter[0].heading:
            head_title = soup.title.get_text(" ", strip=True) if soup.title else ""
            chapter_title = toc_titles.get(item.get_name()) or head_title
            if chapter_title:
                chapter.insert(0, Block(_line(chapter_title), heading=True))
        blocks.extend(chapter)
    titles = book.get_metadata("DC", "title")
    first_heading = next((block.text for block in blocks if block.heading and block.text), "")
    return (titles[0][0] if titles else "") or "", first_heading


def _epub_toc(entries, titles: dict[str, str]) -> None:
    """File name -> title of the first table-of-contents entry pointing into it."""
    for entry in entries:
        if isinstance(entry, tuple | list):
            _epub_toc([entry[0]], titles)
            _epub_toc(entry[1], titles)
        elif getattr(entry, "href", None) and getattr(entry, "title", None):
            titles.setdefault(entry.href.split("#")[0], entry.title)


_HTML_HEADINGS = {"h1", "h2", "h3", "h4", "h5", "h6"}
_HTML_BLOCKS = {
    "address",
    "article",
    "aside",
    "blockquote",
    "body",
    "dd",
    "div",
    "dl",
    "dt",
    "figcaption",
    "figure",
    "footer",
    "header",
    "hr",
    "li",
    "main",
    "nav",
    "ol",
    "p",
    "section",
    "ul",
    *_HTML_HEADINGS,
}
_HTML_SKIPPED = {"script", "style", "noscript", "template", "head"}


def _html_blocks(element, blocks: list[Block]) -> None:
    """The blocks of an (X)HTML element: headings, paragraphs (whitespace collapsed as a browser
    does), ``pre`` as it is, tables as rows."""
    from bs4 import NavigableString, Tag
    from bs4.element import PreformattedString

    inline: list[str] = []

    def flush() -> None:
        text = _line("".join(inline))
        if text:
            blocks.append(Block(text))
        inline.clear()

    for child in element.children:
        if isinstance(child, PreformattedString):  # comments, doctypes, processing instructions
            continue
        if isinstance(child, NavigableString):
            inline.append(str(child))
        elif not isinstance(child, Tag) or child.name in _HTML_SKIPPED:
            continue
        elif child.name in _HTML_HEADINGS:
            flush()
            blocks.append(Block(_line(child.get_text(" ")), heading=True))
        elif child.name == "table":
            flush()
            rows = [row for row in child.find_all("tr") if row.find_parent("table") is child]  # not nested ones
            blocks.append(
                _table([[cell.get_text(" ") for cell in row.find_all(["td", "th"], recursive=False)] for row in rows])
            )
        elif child.name == "pre":
            flush()
            blocks.append(Block(child.get_text()))
        elif child.name == "br":
            flush()
        elif child.name in _HTML_BLOCKS or child.find(list(_HTML_BLOCKS | {"table", "pre"})):
            flush()
            _html_blocks(child, blocks)
        else:
            inline.append(child.get_text())
    flush()


_READERS: dict[str, Callable[[bytes, _Blocks], Parsed]] = {
    ".docx": _read_docx,
    ".pptx": _read_pptx,
    ".xlsx": _read_xlsx,
    ".odt": _read_odt,
    ".epub": _read_epub,
}
