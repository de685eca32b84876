"""The readers of text formats: plain text, Markdown, reStructuredText and HTML.

Each takes the decoded text and returns one ``ReadDocument`` (title, normalized text, sections);
``TEXT_READERS`` maps an extension to its reader (any other text: ``read_plain``).
``knowledge.ingestion.readers`` picks the reader and runs reST and HTML in the parse sandbox.
"""

from __future__ import annotations

import re
from datetime import datetime
from pathlib import Path

from django.utils.timezone import make_aware

from knowledge.ingestion.documents import ReadDocument, Section, locate_sections, normalize_text
from knowledge.ingestion.restructured import rst_plain


def title_from(text: str, fallback: str) -> str:
    """The first non-blank line of ``text`` (at most 200 characters), else ``fallback``."""
    for line in text.split("\n"):
        if line.strip():
            return line.strip()[:200]
    return fallback


def read_plain(text: str, *, name: str, external_id: str, uri: str) -> ReadDocument:
    """Plain text: titled by its first line (else the file name's stem), without sections."""
    text = normalize_text(text)
    return ReadDocument(
        external_id=external_id,
        uri=uri,
        title=title_from(text, Path(name).stem),
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
    title = title or (sections[0].heading if sections else title_from(text, Path(name).stem))
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
    title = sections[0].heading if sections else title_from(normalized, Path(name).stem)
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
    title = title or title_from(plain, Path(name).stem)
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


# The readers of text formats (.txt and any other: ``read_plain``), by extension.
TEXT_READERS = {
    ".rst": _read_rst,
    ".md": _read_markdown,
    ".markdown": _read_markdown,
    ".html": _read_html,
    ".htm": _read_html,
}
