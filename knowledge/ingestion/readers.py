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

Plain text, Markdown and JSONL are read in the calling process: their readers take time linear in
the file's length, whatever its shape (``tests/security/test_reader_complexity.py`` feeds them
shapes built to make a regular expression backtrack).
"""

from __future__ import annotations

import codecs
import json
import re
from datetime import datetime
from functools import partial
from pathlib import Path

from django.utils.dateparse import parse_date, parse_datetime
from django.utils.timezone import make_aware

from core.errors import InvalidInput, UnsupportedFileType
from knowledge.ingestion import sandbox
from knowledge.ingestion.documents import ReadDocument, Section, locate_sections, normalize_text
from knowledge.ingestion.office import OFFICE_READER_MODULES, office_check, read_office
from knowledge.ingestion.pdf import PRELOAD as PDF_READER_MODULES
from knowledge.ingestion.pdf import RATIO_EXEMPT_BYTES as RATIO_EXEMPT_BYTES  # knowledge.connectors.git
from knowledge.ingestion.pdf import read_pdf, time_allowance_s
from knowledge.ingestion.restructured import rst_plain

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
        docs = _read_jsonl(decode_text(data, name=name), name=name)
    elif suffix in SANDBOXED_EXTENSIONS:
        more_time_s = 0.0
        if suffix == ".pdf":  # each page read adds a little time (knowledge.ingestion.pdf)
            parse = partial(read_pdf, data, name=name, external_id=external_id, uri=uri)
            more_time_s = time_allowance_s()
        elif suffix in OFFICE_EXTENSIONS:
            parse = partial(read_office, data, name=name, external_id=external_id, uri=uri)
        else:  # decoded here: a file that is not text is refused without a child
            text = decode_text(data, name=name)
            parse = partial(_TEXT_READERS[suffix], text, name=name, external_id=external_id, uri=uri)
        docs = [sandbox.parse_isolated(parse, name=name, preload=_READER_MODULES[suffix], more_time_s=more_time_s)]
    else:
        text = decode_text(data, name=name)
        reader = _TEXT_READERS.get(suffix, _read_plain)
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
        _read_jsonl(decode_text(data, name=name), name=name)
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


def _title_from(text: str, fallback: str) -> str:
    for line in text.split("\n"):
        if line.strip():
            return line.strip()[:200]
    return fallback


def _read_plain(text: str, *, name: str, external_id: str, uri: str) -> ReadDocument:
    text = normalize_text(text)
    return ReadDocument(
        external_id=external_id,
        uri=uri,
        title=_title_from(text, Path(name).stem),
        text=text,
    )


def markdown_heading(line: str) -> tuple[int, str] | None:
    """(level, text) of an ATX heading line (``## Text ##``: 1-6 ``#``, then whitespace), or None.

    The closing ``#`` run and the whitespace around the text are dropped. ``line`` is one line
    without trailing whitespace (as ``normalize_text`` leaves it). String methods only, so the
    time is linear in ``len(line)`` (the regular expression this replaces backtracked: a heading
    ending in a run of spaces took cubic time, 1,600 characters 9 s).
    """
    level = len(line) - len(line.lstrip("#"))
    if not 1 <= level <= 6 or not line[level : level + 1].isspace():
        return None
    body = line[level:].strip()
    # The text is what remains without the closing run of "#" and the whitespace before it; a
    # heading that is nothing but "#" keeps one.
    return level, (body.rstrip("#").rstrip() or body[:1])


def _read_markdown(text: str, *, name: str, external_id: str, uri: str) -> ReadDocument:
    text = normalize_text(text)
    sections: list[Section] = []
    title = ""
    offset = 0
    in_fence = False
    for line in text.split("\n"):
        if line.startswith("```"):
            in_fence = not in_fence
        heading = None if in_fence else markdown_heading(line)
        if heading:
            level, heading_text = heading
            if not title and level == 1:
                title = heading_text
            sections.append(Section(heading=heading_text, start=offset))
        offset += len(line) + 1
    title = title or (sections[0].heading if sections else _title_from(text, Path(name).stem))
    return ReadDocument(
        external_id=external_id,
        uri=uri,
        title=title[:500],
        text=text,
        sections=sections,
    )


def _read_rst(text: str, *, name: str, external_id: str, uri: str) -> ReadDocument:
    """reST parsed by docutils (``knowledge.ingestion.restructured``): clean text, titles, sections."""
    plain, headings = rst_plain(text)
    normalized = normalize_text(plain)
    sections = locate_sections(normalized, headings, whole_lines=True)
    title = sections[0].heading if sections else _title_from(normalized, Path(name).stem)
    return ReadDocument(
        external_id=external_id,
        uri=uri,
        title=title[:500],
        text=normalized,
        sections=sections,
        published_at=_date_under_title(normalized),
    )


_DATE_LINE = re.compile(r"^\*?([A-Z][a-z]+ \d{1,2}, \d{4})\*?$")


def _date_under_title(text: str) -> datetime | None:
    """A date line such as ``*April 2, 2025*`` among the first lines (Django release notes)."""
    for line in text.split("\n")[:6]:
        match = _DATE_LINE.match(line.strip())
        if match:
            try:
                return make_aware(datetime.strptime(match.group(1), "%B %d, %Y"))
            except ValueError:
                return None
    return None


# Marks where each heading starts while a page's text is extracted: a noncharacter, removed from
# the page first.
_HEADING_MARK = "\uffff"


def _read_html(text: str, *, name: str, external_id: str, uri: str) -> ReadDocument:
    """An HTML page's text (without scripts, styles, navigation, headers and footers), its title
    (``<title>``, else the first ``<h1>``) and its ``h1``-``h4`` headings as sections; tables as
    Markdown tables (``_tables_as_markdown``).

    Parsed with lxml (libxml2's HTML parser, linear in the page's length; the standard library's
    ``html.parser`` of Python 3.11.7 takes quadratic time on runs of ``<a`` or ``</``), with
    ``huge_tree``: without it libxml2 stops a comment or a text node at 10,000,000 bytes and, past
    that, an unclosed ``<?`` costs 10 MB of scanning per character (a 10.02 MB page: 130 s).
    Each heading's start is marked in the tree before the text is extracted, so sections cost
    no search in the text.
    """
    from bs4 import BeautifulSoup

    soup = BeautifulSoup(text.replace(_HEADING_MARK, "").replace("\x00", ""), "lxml", huge_tree=True)
    for tag in soup(["script", "style", "noscript", "nav", "header", "footer", "template"]):
        tag.decompose()
    title_tag = soup.find("title") or soup.find("h1")
    title = title_tag.get_text(" ", strip=True) if title_tag else ""
    body = soup.body or soup
    _tables_as_markdown(body)
    headings = []
    for tag in body.find_all(["h1", "h2", "h3", "h4"]):
        heading = tag.get_text(" ", strip=True)
        if heading:
            _mark_start(tag)
            headings.append(normalize_text(heading))
    pieces = normalize_text(body.get_text("\n")).split(_HEADING_MARK)
    plain = "".join(pieces)
    sections = []
    start = len(pieces[0])
    for heading, piece in zip(headings, pieces[1:], strict=False):
        sections.append(Section(heading=heading, start=start))
        start += len(piece)
    title = title or _title_from(plain, Path(name).stem)
    return ReadDocument(
        external_id=external_id,
        uri=uri,
        title=title[:500],
        text=plain,
        sections=sections,
    )


def _tables_as_markdown(body) -> None:
    """Put each outermost ``<table>`` of ``body`` as a Markdown table with its caption, on lines
    of its own (``knowledge.ingestion.tables.html_table``: nested tables flattened into their
    cell); one-column layout tables become lines of text."""
    from bs4 import NavigableString

    from knowledge.ingestion.tables import html_table, outer_html_tables

    for table in outer_html_tables(body):
        table.replace_with(NavigableString(f"\n\n{html_table(table)}\n\n"))


def _mark_start(tag) -> None:
    """Put ``_HEADING_MARK`` before the first character of ``tag``'s text that is not whitespace.

    There, normalizing the text neither moves it nor is changed by it (it stands after
    whitespace, before a character of a line that is not blank).
    """
    from bs4 import NavigableString

    for string in tag.strings:
        stripped = string.lstrip()
        if stripped:
            lead = string[: len(string) - len(stripped)]
            string.replace_with(NavigableString(lead + _HEADING_MARK + stripped))
            return


# The readers of text formats (.txt and any other: ``_read_plain``), by extension.
_TEXT_READERS = {
    ".rst": _read_rst,
    ".md": _read_markdown,
    ".markdown": _read_markdown,
    ".html": _read_html,
    ".htm": _read_html,
}


_JSONL_TEXT_KEYS = ("text", "body", "content")
_JSONL_RESERVED = {
    "id",
    "external_id",
    "title",
    "uri",
    "url",
    "published_at",
    "date",
    *_JSONL_TEXT_KEYS,
}


# Limits of the ``Document`` fields a JSONL line fills (see ``knowledge.models.Document``).
_MAX_EXTERNAL_ID = 1000
_MAX_URI = 2000
_MAX_TITLE = 500
# The database refuses NUL characters and lone surrogates (they cannot be encoded as UTF-8).
_BAD_CHARACTER = re.compile("[\x00\ud800-\udfff]")


def _jsonl_error(name: str, number: int, problem: str) -> InvalidInput:
    return InvalidInput(f"{name}, line {number}: {problem}", code="malformed_jsonl")


def _check_characters(value, *, what: str, name: str, number: int) -> None:
    """Raise ``InvalidInput`` if a string in ``value`` (nested keys and values too) can't be stored."""
    if isinstance(value, dict):
        for key, item in value.items():
            _check_characters(key, what=what, name=name, number=number)
            label = f"field {key!r}" if what == "a field name" else f"{what}[{key!r}]"
            _check_characters(item, what=label, name=name, number=number)
    elif isinstance(value, list):
        for item in value:
            _check_characters(item, what=what, name=name, number=number)
    elif isinstance(value, str):
        match = _BAD_CHARACTER.search(value)
        if match:
            kind = "a NUL character" if match.group() == "\x00" else "an unpaired surrogate"
            raise _jsonl_error(name, number, f"{what} contains {kind} (\\u{ord(match.group()):04x}).")


def _check_length(value: str, limit: int, *, what: str, name: str, number: int) -> None:
    if len(value) > limit:
        raise _jsonl_error(
            name, number, f"{what} is {len(value)} characters long; the limit is {limit} ({value[:40]!r}…)."
        )


def _reject_constant(constant: str):
    raise ValueError(f"{constant} is not valid JSON")


def _read_jsonl(text: str, *, name: str) -> list[ReadDocument]:
    """One JSON object per line with a text field (``text``, ``body`` or ``content``).

    Optional: ``id``/``external_id``, ``title``, ``uri``/``url``, ``published_at``/``date``;
    other keys become metadata. Any malformed line rejects the whole file: bad JSON, an id over
    1,000 or a uri over 2,000 characters, a NUL character, an impossible date.
    """
    docs: list[ReadDocument] = []
    seen: set[str] = set()
    for number, line in enumerate(text.split("\n"), start=1):
        if not line.strip():
            continue
        try:
            row = json.loads(line, parse_constant=_reject_constant)
        except (ValueError, RecursionError) as exc:
            reason = exc.msg if isinstance(exc, json.JSONDecodeError) else str(exc) or "nested too deeply"
            raise _jsonl_error(name, number, f"malformed JSON ({reason}).") from exc
        if not isinstance(row, dict):
            raise _jsonl_error(name, number, "expected a JSON object.")
        _check_characters(row, what="a field name", name=name, number=number)
        body = next((row[k] for k in _JSONL_TEXT_KEYS if isinstance(row.get(k), str)), None)
        if body is None or not body.strip():
            raise _jsonl_error(name, number, "no non-empty 'text', 'body' or 'content' field.")
        title = str(row.get("title") or "").strip()
        external_id = str(row.get("external_id") or row.get("id") or title or f"{name}#{number}")
        _check_length(external_id, _MAX_EXTERNAL_ID, what="the id", name=name, number=number)
        if external_id in seen:
            raise _jsonl_error(name, number, f"duplicate id {external_id!r}.")
        seen.add(external_id)
        uri = str(row.get("uri") or row.get("url") or "")
        _check_length(uri, _MAX_URI, what="the uri", name=name, number=number)
        normalized = normalize_text(body)
        docs.append(
            ReadDocument(
                external_id=external_id,
                uri=uri,
                title=(title or _title_from(normalized, external_id))[:_MAX_TITLE],
                text=normalized,
                published_at=_parse_when(row.get("published_at") or row.get("date"), name=name, number=number),
                metadata={k: v for k, v in row.items() if k not in _JSONL_RESERVED},
            )
        )
    if not docs:
        raise InvalidInput(f"{name}: the file is empty.", code="empty_file")
    return docs


def _parse_when(value, *, name: str, number: int) -> datetime | None:
    """``published_at``/``date`` as an aware datetime; ``InvalidInput`` naming the line if impossible."""
    if value in (None, ""):
        return None
    try:
        parsed = parse_datetime(str(value))
        if parsed is None:
            day = parse_date(str(value))
            parsed = datetime(day.year, day.month, day.day) if day else None
    except ValueError as exc:  # well-formed but impossible, e.g. 2024-02-30 or 25:61
        raise _jsonl_error(name, number, f"invalid date {value!r} ({exc}).") from exc
    if parsed is None:
        raise _jsonl_error(name, number, f"unreadable date {value!r}.")
    return parsed if parsed.tzinfo else make_aware(parsed)
