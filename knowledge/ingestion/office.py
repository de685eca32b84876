"""Office and e-book readers: .docx (python-docx), .pptx (python-pptx), .xlsx (openpyxl), .odt
(odfpy) and .epub (``knowledge.ingestion.epub``), called by ``readers.read_bytes``.

Each format becomes a list of blocks, headings and text, in reading order
(``knowledge.ingestion.office_blocks``); the blocks are normalized and joined by blank lines, and
the headings' sections (and a .pptx's pages) are their offsets in the result. What becomes a
heading:

* .docx: paragraphs styled "Title" or "Heading 1" to "Heading 9";
* .pptx: each slide, as "Slide 3: <its title>" ("Slide 3" when it has none);
* .xlsx: each sheet, by its name;
* .odt: ``text:h`` elements;
* .epub: each chapter (its table-of-contents entry when it does not open with a heading) and
  its ``h1``-``h6``.

Tables become Markdown tables (``knowledge.ingestion.tables``): the first row is the header, one
line per row; rows and columns without text are left out, and a table of one column is read as
lines of text. A .docx table's caption is the paragraph styled "Caption" right before it (else
right after it); an .odt table's, the paragraph with a "Table" number sequence next to it; an
HTML or EPUB table's, its ``<caption>``. Merged cells: a value spanning rows is repeated in each
row (so a row read alone still has it), the other columns a value spans are left empty; in .xlsx
merged cells are left empty (openpyxl's streaming mode does not know them). A table nested in a
cell is flattened into that cell's text.

Pictures in .docx (in paragraphs), .pptx (picture shapes, groups too) and .odt (frames) are read
with OCR and kept where they stand as ``[Image: <text>]`` (``knowledge.ingestion.office_images``:
icons skipped, at most ``KB_OCR_MAX_PAGES`` per document, counted in ``metadata["ocr_images"]``
and ``["ocr_images_skipped"]``). Pictures inside table cells, headers and footers are not read.
Each picture kept as text is kept as a PNG too, to be shown beside citations (at most
``office_images.MAX_PICTURES``: ``ReadDocument.images``, listed in ``metadata["figures"]``); a
.docx picture's caption is the paragraph styled "Caption" right after its paragraph (else right
before it) that no table took, an .odt's the paragraph holding a "Figure", "Illustration" or
"Drawing" number sequence around it or next to it.

A .pptx is paged: its slides are its pages, ``metadata["pages"]`` (all slides) and
``["page_starts"]`` (where each slide's text starts; a slide without text starts where the next
one does), and ``["ocr_pages"]``/``["ocr_skipped"]`` name the slides whose pictures were read or
left over the budget.

The title is the document's own (core properties, EPUB or ODF metadata), else the first heading
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
from datetime import date, datetime, time
from pathlib import Path

from django.conf import settings

from core.errors import ApplicationError, InvalidInput
from core.uploads import size_text
from knowledge.ingestion.documents import ReadDocument
from knowledge.ingestion.epub import read_epub
from knowledge.ingestion.odt import read_odt
from knowledge.ingestion.office_blocks import Block, Blocks, Parsed, document_from, first_heading, line
from knowledge.ingestion.office_images import ImageReader
from knowledge.ingestion.tables import markdown_table

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
    ".docx": ("docx", "PIL.Image"),
    ".pptx": ("pptx", "PIL.Image"),
    ".xlsx": ("openpyxl",),
    ".odt": ("odf.opendocument", "odf.dc", "PIL.Image"),
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


def read_office(data: bytes, *, name: str, external_id: str, uri: str) -> ReadDocument:
    """Read a .docx, .pptx, .xlsx, .odt or .epub file ``name`` from ``data``.

    Returns one ``ReadDocument`` (its text may be empty: ``read_bytes`` refuses that). Raises
    ``InvalidInput`` for an empty, damaged, encrypted or mislabelled file, naming it; the OCR's
    own errors (``OcrDeferred``, a timeout) go through.
    """
    suffix = Path(name).suffix.lower()
    office_check(data, name=name)
    reader = _READERS[suffix]
    blocks = Blocks(name=name, limit=settings.KB_PARSE_MAX_CHARS)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # libraries warn about odd but readable files
            parsed = reader(data, blocks, ImageReader(name=name))
    except ApplicationError:
        raise
    except MemoryError:
        raise
    except Exception:  # each library has its own zoo of errors for a bad file
        logger.info("Could not read %s as %s", name, _KINDS[suffix], exc_info=True)
        raise _invalid(name, suffix) from None
    return document_from(blocks, parsed, name=name, external_id=external_id, uri=uri)


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


# Each reader fills the blocks it is given, OCRs pictures with the image reader, and says what
# else it found.
Reader = Callable[[bytes, Blocks, ImageReader], Parsed]

_W = "http://schemas.openxmlformats.org/wordprocessingml/2006/main"
_R = "http://schemas.openxmlformats.org/officeDocument/2006/relationships"
_BLIP = "{http://schemas.openxmlformats.org/drawingml/2006/main}blip"
_VML_IMAGE = "{urn:schemas-microsoft-com:vml}imagedata"
_DOC_PR = "{http://schemas.openxmlformats.org/drawingml/2006/wordprocessingDrawing}docPr"
_FALLBACK = "{http://schemas.openxmlformats.org/markup-compatibility/2006}Fallback"


def _read_docx(data: bytes, blocks: Blocks, images: ImageReader) -> Parsed:
    import docx
    from docx.table import Table

    document = docx.Document(io.BytesIO(data))
    # Style id -> name: ``paragraph.style`` searches the style sheet on every call.
    style_names: dict[str | None, str] = {}

    def style(item) -> str:
        if isinstance(item, Table):
            return ""
        if item._p.style not in style_names:
            style_names[item._p.style] = (item.style.name if item.style is not None else "") or ""
        return style_names[item._p.style]

    items = list(document.iter_inner_content())
    styles = [style(item) for item in items]
    captions = _docx_captions(items, styles)
    caption_indexes = set(captions.values())
    for index, item in enumerate(items):
        if index in caption_indexes:
            continue  # a table's caption, written with its table
        if isinstance(item, Table):
            caption = items[captions[index]].text if index in captions else ""
            blocks.append(Block(markdown_table(_docx_rows(item), caption=caption)))
        elif style(item) == "Title" or re.fullmatch(r"Heading [1-9]", style(item)):
            blocks.append(Block(line(item.text), heading=True))
        else:
            blocks.append(Block(item.text))
            caption = _docx_picture_caption(items, styles, index, taken=caption_indexes)
            blocks.extend(_docx_pictures(item, document.part, images, caption=caption))
    return Parsed(document.core_properties.title or "", first_heading(blocks), metadata=images.metadata())


def _docx_captions(items: list, styles: list[str]) -> dict[int, int]:
    """Table index -> the index of its caption: the paragraph styled "Caption" right before it,
    else right after it."""
    from docx.table import Table

    captions: dict[int, int] = {}
    taken: set[int] = set()
    for index, item in enumerate(items):
        if not isinstance(item, Table):
            continue
        for candidate in (index - 1, index + 1):
            if 0 <= candidate < len(items) and styles[candidate] == "Caption" and candidate not in taken:
                captions[index] = candidate
                taken.add(candidate)
                break
    return captions


def _docx_picture_caption(items: list, styles: list[str], index: int, *, taken: set[int]) -> str:
    """The caption of the pictures of paragraph ``index``: the paragraph styled "Caption" right
    after it, else right before it, that is no table's caption; "" for none."""
    for candidate in (index + 1, index - 1):
        if 0 <= candidate < len(items) and styles[candidate] == "Caption" and candidate not in taken:
            return line(items[candidate].text)
    return ""


def _docx_rows(table) -> list[list[str]]:
    """A table's rows of cell texts on the layout grid: a cell spanning columns comes once (the
    columns it spans are empty), one spanning rows in each row (python-docx gives it so)."""
    rows = []
    for row in table.rows:
        cells = [""] * row.grid_cols_before
        previous = None
        for cell in row.cells:  # a cell spanning columns comes once per grid column
            cells.append("" if cell._tc is previous else _docx_cell_text(cell))
            previous = cell._tc
        rows.append(cells)
    return rows


def _docx_cell_text(cell) -> str:
    """A cell's paragraphs and the cells of tables nested in it, in order, as one text."""
    from docx.table import Table

    parts = []
    for item in cell.iter_inner_content():
        if isinstance(item, Table):
            parts.extend(text for row in _docx_rows(item) for text in row if text)
        else:
            parts.append(item.text)
    return " ".join(parts)


def _docx_pictures(paragraph, part, images: ImageReader, *, caption: str = "") -> list[Block]:
    """The blocks of the pictures in a paragraph (DrawingML, and VML in older files), in order;
    ``caption``: the paragraph's caption paragraph's text, for its pictures."""
    blocks, seen = [], set()
    for element in paragraph._p.iter(_BLIP, _VML_IMAGE):
        if any(ancestor.tag == _FALLBACK for ancestor in element.iterancestors()):
            continue  # the same picture, for programs that do not read the preferred form
        key = element.get(f"{{{_R}}}embed") if element.tag == _BLIP else element.get(f"{{{_R}}}id")
        related = part.related_parts.get(key) if key else None
        if key in seen or related is None:
            continue
        seen.add(key)
        block = images.block(getattr(related, "blob", None), alt=_docx_alt(element), caption=caption)
        if block is not None:
            blocks.append(block)
    return blocks


def _docx_alt(element) -> str:
    """The alternative text of a picture: its drawing's ``descr`` (or a VML shape's ``alt``)."""
    for ancestor in element.iterancestors():
        if ancestor.tag == f"{{{_W}}}p":
            break
        properties = ancestor.find(_DOC_PR)
        if properties is not None:
            return properties.get("descr", "") or properties.get("title", "")
        if ancestor.get("alt"):
            return ancestor.get("alt")
    return ""


def _read_pptx(data: bytes, blocks: Blocks, images: ImageReader) -> Parsed:
    from pptx import Presentation

    presentation = Presentation(io.BytesIO(data))
    first_title = ""
    slides = list(presentation.slides)
    for number, slide in enumerate(slides, start=1):
        title_shape = slide.shapes.title
        title = line(title_shape.text_frame.text) if title_shape is not None and title_shape.has_text_frame else ""
        body: list[Block] = []
        for shape in slide.shapes:
            if title_shape is None or shape.shape_id != title_shape.shape_id:
                body.extend(_pptx_shape(shape, images, number))
        if slide.has_notes_slide and slide.notes_slide.notes_text_frame is not None:
            body.append(Block(_pptx_text(slide.notes_slide.notes_text_frame), page=number))
        if not title and not any(block.text.strip() for block in body):
            continue  # a slide without text adds nothing to search
        first_title = first_title or title
        blocks.append(Block(f"Slide {number}: {title}" if title else f"Slide {number}", heading=True, page=number))
        blocks.extend(body)
    return Parsed(
        presentation.core_properties.title or "", first_title, pages=len(slides), metadata=images.metadata(paged=True)
    )


def _pptx_shape(shape, images: ImageReader, page: int) -> list[Block]:
    from pptx.shapes.group import GroupShape
    from pptx.shapes.picture import Picture

    if isinstance(shape, GroupShape):
        return [block for child in shape.shapes for block in _pptx_shape(child, images, page)]
    if isinstance(shape, Picture):
        try:
            blob = shape.image.blob
        except Exception:  # a linked picture, or one whose part is missing
            blob = None
        block = images.block(blob, alt=shape._element._nvXxPr.cNvPr.get("descr", ""), page=page)
        return [block] if block is not None else []
    if shape.has_table:
        return [Block(markdown_table(_pptx_rows(shape.table)), page=page)]
    if shape.has_text_frame:
        return [Block(_pptx_text(shape.text_frame), page=page)]
    return []


def _pptx_rows(table) -> list[list[str]]:
    """A table's rows of cell texts: a merged cell's value in each row it spans (in its first
    column), its other columns empty."""
    repeated: dict[tuple[int, int], str] = {}
    rows = []
    for r, row in enumerate(table.rows):
        cells = []
        for c, cell in enumerate(row.cells):
            if cell.is_spanned:
                cells.append(repeated.get((r, c), ""))
                continue
            cells.append(cell.text)
            if cell.is_merge_origin:
                repeated.update({(r + k, c): cell.text for k in range(1, cell.span_height)})
        rows.append(cells)
    return rows


def _pptx_text(frame) -> str:
    return frame.text.replace("\v", "\n")  # python-pptx gives a line break as a vertical tab


def _read_xlsx(data: bytes, blocks: Blocks, images: ImageReader) -> Parsed:
    """Each sheet with rows: its name as a heading, its rows as a Markdown table (the first row
    the header). Pictures are not read (``images`` is not used)."""
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
            table = markdown_table(rows)
            if table:
                blocks += [Block(line(sheet.title), heading=True), Block(table)]
        return Parsed(workbook.properties.title or "", "")
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


_READERS: dict[str, Reader] = {
    ".docx": _read_docx,
    ".pptx": _read_pptx,
    ".xlsx": _read_xlsx,
    ".odt": read_odt,
    ".epub": read_epub,
}
