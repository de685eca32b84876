"""Readers: turn a file into one or more ``ReadDocument`` (title, normalized text, sections).

Supported: .txt, .md/.markdown, .rst (docutils), .html/.htm (BeautifulSoup with lxml), .pdf
(pdfplumber, in reading order, with where each page and line stands: ``knowledge.ingestion.pdf``),
.jsonl (one document per line), and office and e-book files, .docx, .pptx, .xlsx, .odt
and .epub (read by ``knowledge.ingestion.office``). Every reader raises ``InvalidInput`` for
empty, undecodable, damaged or encrypted content and ``UnsupportedFileType`` for other
extensions, before anything is stored.

The formats that decompress (PDF and the zip-based ones), reST (docutils takes quadratic time on
some shapes, e.g. many sibling sections) and HTML (a tree of the whole page), together
``SANDBOXED_EXTENSIONS``, are read in a child process with its own memory and CPU limits
(``knowledge.ingestion.sandbox``), under caps on what a file may unpack to:
``KB_PARSE_MAX_UNPACKED_MB`` (a zip's declared members, a PDF's decompressed content streams),
``KB_PARSE_MAX_RATIO`` (compression ratio), ``KB_PARSE_MAX_CHARS`` (extracted characters) and
``KB_PARSE_MAX_PDF_PAGES``. Over a cap: ``InvalidInput`` with code ``archive_bomb`` (unpacked
size, ratio) or ``document_too_large`` (characters, pages). ``read_check`` is the cheap part, for
a web request: type, signature, declared sizes, and the decoding of text formats; the parse itself
runs later, in the ingestion job.

The text formats' readers are ``knowledge.ingestion.text_formats``, the JSONL reader
``knowledge.ingestion.jsonl``. Plain text, Markdown and JSONL are read in the calling process: their readers take time linear in
the file's length, whatever its shape (``tests/security/test_reader_complexity.py`` feeds them
shapes built to make a regular expression backtrack).
"""

from __future__ import annotations

import codecs
from functools import partial
from pathlib import Path

from core.errors import InvalidInput, UnsupportedFileType
from knowledge.ingestion import sandbox
from knowledge.ingestion.documents import ReadDocument
from knowledge.ingestion.documents import normalize_text as normalize_text  # quality.importers
from knowledge.ingestion.jsonl import read_jsonl
from knowledge.ingestion.office import OFFICE_READER_MODULES, office_check, read_office
from knowledge.ingestion.pdf import PRELOAD as PDF_READER_MODULES
from knowledge.ingestion.pdf import RATIO_EXEMPT_BYTES as RATIO_EXEMPT_BYTES  # knowledge.connectors.git
from knowledge.ingestion.pdf import read_pdf, time_allowance_s
from knowledge.ingestion.text_formats import TEXT_READERS, read_plain

SUPPORTED_EXTENSIONS = (
    ".txt",
    ".md",
    ".markdown",
    ".rst",
    ".html",
    ".htm",
    ".pdf",
    ".jsonl",
    ".docx",
    ".pptx",
    ".xlsx",
    ".odt",
    ".epub",
)
# Zip-based formats read by ``knowledge.ingestion.office``.
OFFICE_EXTENSIONS = (".docx", ".pptx", ".xlsx", ".odt", ".epub")
# Text formats whose parsers are not linear in every input (docutils) or build a tree of the whole
# file (HTML): parsed in a child process too.
SANDBOXED_TEXT_EXTENSIONS = (".rst", ".html", ".htm")
# Formats parsed in a child process (``knowledge.ingestion.sandbox``): those whose readers
# decompress, and the text formats above.
SANDBOXED_EXTENSIONS = (".pdf", *OFFICE_EXTENSIONS, *SANDBOXED_TEXT_EXTENSIONS)
# What a sandboxed reader imports: loaded once in the parent, so a child does not import it per file.
_READER_MODULES = {
    ".pdf": PDF_READER_MODULES,
    **OFFICE_READER_MODULES,
    ".rst": ("docutils.parsers.rst",),
    ".html": ("bs4", "lxml.etree"),
    ".htm": ("bs4", "lxml.etree"),
}
# A PDF starts with this signature (readers accept it within the first 1,024 bytes).
PDF_SIGNATURE = b"%PDF-"


_UTF16_BOMS = ((codecs.BOM_UTF16_LE, "utf-16-le"), (codecs.BOM_UTF16_BE, "utf-16-be"))


def decode_text(data: bytes, *, name: str) -> str:
    """Decode bytes as text: UTF-8 (with or without a BOM) or UTF-16 with a BOM.

    Raises ``InvalidInput`` for empty or binary content and names the encoding problem.
    """
    if not data.strip():
        raise InvalidInput(f"{name}: the file is empty.", code="empty_file")
    encoding = next((enc for bom, enc in _UTF16_BOMS if data.startswith(bom)), None)
    if encoding:
        try:
            text = data[2:].decode(encoding)
        except UnicodeDecodeError as exc:
            raise InvalidInput(
                f"{name}: not valid {encoding.upper()} text ({exc.reason} at byte {exc.start + 2}); "
                "is it a binary file?",
                code="binary_file",
            ) from exc
        if "\x00" in text[:4096]:
            raise InvalidInput(f"{name}: looks like a binary file, not text.", code="binary_file")
        if not text.strip():
            raise InvalidInput(f"{name}: the file is empty.", code="empty_file")
        return text
    if b"\x00" in data[:8192]:
        raise InvalidInput(f"{name}: looks like a binary file, not text.", code="binary_file")
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise InvalidInput(
            f"{name}: not valid UTF-8 text ({exc.reason} at byte {exc.start}); "
            "save it as UTF-8 or UTF-16 with a BOM. Is it a binary file?",
            code="binary_file",
        ) from exc


def read_bytes(
    data: bytes,
    *,
    name: str,
    external_id: str | None = None,
    uri: str = "",
    fmt: str | None = None,
) -> list[ReadDocument]:
    """Read the file ``name`` from ``data``; its extension picks the reader.

    ``fmt`` ("rst", "md" or "txt") says how to read ``.txt`` files (Django's docs are reST in .txt).

    Returns one ``ReadDocument`` per document (several for .jsonl). ``external_id`` defaults to
    ``name``. Raises ``UnsupportedFileType`` or ``InvalidInput``. The formats of
    ``SANDBOXED_EXTENSIONS`` (.txt read as reST too) are parsed in the sandbox's child, so a file
    that needs more than its limits fails with ``parse_timeout`` or ``document_too_large``.
    """
    suffix = _suffix(name, fmt)
    external_id = external_id or name
    if suffix == ".jsonl":
        docs = read_jsonl(decode_text(data, name=name), name=name)
    elif suffix in SANDBOXED_EXTENSIONS:
        more_time_s = 0.0
        if suffix == ".pdf":  # each page read adds a little time (knowledge.ingestion.pdf)
            parse = partial(read_pdf, data, name=name, external_id=external_id, uri=uri)
            more_time_s = time_allowance_s()
        elif suffix in OFFICE_EXTENSIONS:
            parse = partial(read_office, data, name=name, external_id=external_id, uri=uri)
        else:  # decoded here: a file that is not text is refused without a child
            text = decode_text(data, name=name)
            parse = partial(TEXT_READERS[suffix], text, name=name, external_id=external_id, uri=uri)
        docs = [sandbox.parse_isolated(parse, name=name, preload=_READER_MODULES[suffix], more_time_s=more_time_s)]
    else:
        text = decode_text(data, name=name)
        reader = TEXT_READERS.get(suffix, read_plain)
        docs = [reader(text, name=name, external_id=external_id, uri=uri)]
    for doc in docs:
        if not doc.text.strip():
            raise InvalidInput(f"{name}: no text could be extracted.", code="empty_file")
    if suffix == ".pdf":  # kept per version to be shown as it was made (knowledge.services.originals)
        docs[0].original = data
    return docs


def read_check(data: bytes, *, name: str, fmt: str | None = None) -> None:
    """The checks of ``read_bytes`` that are cheap enough for a web request; nothing is parsed.

    The type (its extension, ``fmt`` for .txt as in ``read_bytes``); a PDF's signature; an office
    or e-book file's zip directory (encrypted, old binary or damaged files, and the declared sizes
    against ``KB_PARSE_MAX_UNPACKED_MB`` and ``KB_PARSE_MAX_RATIO``: ``office_check``); the
    decoding of text formats, and every line of a JSONL file. Their time and memory are bounded by
    the upload limit. Raises ``UnsupportedFileType`` or ``InvalidInput`` like ``read_bytes``;
    a file that passes may still fail when its job reads it (e.g. a PDF past a cap).
    """
    suffix = _suffix(name, fmt)
    if suffix == ".pdf":
        if not data.strip():
            raise InvalidInput(f"{name}: the file is empty.", code="empty_file")
        if PDF_SIGNATURE not in data[:1024]:
            raise InvalidInput(
                f"{name}: not a PDF (it does not start with {PDF_SIGNATURE.decode()}).", code="invalid_pdf"
            )
    elif suffix in OFFICE_EXTENSIONS:
        office_check(data, name=name)
    elif suffix == ".jsonl":
        read_jsonl(decode_text(data, name=name), name=name)
    else:
        decode_text(data, name=name)


def _suffix(name: str, fmt: str | None) -> str:
    """The reader ``name`` goes to (its extension, or ``fmt`` for .txt); ``UnsupportedFileType`` if none."""
    suffix = Path(name).suffix.lower()
    if fmt and suffix == ".txt":
        suffix = f".{fmt.lstrip('.').lower()}"
    if suffix not in SUPPORTED_EXTENSIONS:
        raise UnsupportedFileType(
            f"{name}: unsupported file type {suffix or '(none)'}; supported: {', '.join(SUPPORTED_EXTENSIONS)}."
        )
    return suffix


def read_path(
    path: Path,
    *,
    root: Path | None = None,
    uri_prefix: str = "",
    fmt: str | None = None,
) -> list[ReadDocument]:
    """Read a file from disk; its ``external_id`` is its path relative to ``root`` (without suffix).

    ``uri_prefix`` + that relative path gives the URI (else the file path); ``fmt`` says how to
    read ``.txt`` files (see ``read_bytes``).
    """
    relative = path.relative_to(root) if root else Path(path.name)
    external_id = str(relative.with_suffix("")) if path.suffix.lower() != ".jsonl" else str(relative)
    uri = f"{uri_prefix}{relative.with_suffix('')}" if uri_prefix else str(path)
    return read_bytes(path.read_bytes(), name=path.name, external_id=external_id, uri=uri, fmt=fmt)
