"""What a reader gives: a ``ReadDocument`` (title, normalized text, sections), and the helpers every
reader shares (text normalization, finding headings' offsets). ``knowledge.ingestion.readers`` and
``knowledge.ingestion.office`` build on it.
"""

from __future__ import annotations

import bisect
import functools
import re
import unicodedata
from dataclasses import dataclass, field
from datetime import datetime


@dataclass
class Section:
    """A heading and the character offset where its content starts in the normalized text."""

    heading: str
    start: int


@dataclass
class ReadDocument:
    """A document as read from a file, before storage.

    ``text`` is normalized (NFC, ``\\n`` line ends, no trailing spaces, at most one blank line);
    ``sections`` are in ascending ``start`` order. ``original`` holds the file's bytes when the
    document is kept as it was made, to be shown (a PDF: ``knowledge.services.originals``), else
    ``None``. ``images`` holds the pictures an office reader keeps to be shown beside citations
    (PNGs, listed in ``metadata["figures"]``: ``knowledge.ingestion.office_images``), written
    beside the originals when the version is stored.
    """

    external_id: str
    title: str
    text: str
    uri: str = ""
    published_at: datetime | None = None
    metadata: dict = field(default_factory=dict)
    sections: list[Section] = field(default_factory=list)
    original: bytes | None = field(default=None, repr=False, compare=False)
    images: list[bytes] = field(default_factory=list, repr=False, compare=False)


# UAX #15's Stream-Safe Text Format: at most 30 non-starters (characters of a non-zero canonical
# combining class) in a row; a longer run gets U+034F COMBINING GRAPHEME JOINER (a starter that
# composes with nothing) after every 30. CPython's NFC sorts a run of non-starters by insertion,
# so without it one run of n marks out of order costs n² steps (200,000 marks: 25 s).
STREAM_SAFE_RUN = 30
_GRAPHEME_JOINER = "\u034f"
# Unicode puts every non-starter in planes 0 and 1 (the last, U+1E94A, as of Unicode 15).
_LAST_SCANNED = 0x1FFFF


@functools.cache
def _long_runs() -> re.Pattern:
    """A pattern for a run of more than ``STREAM_SAFE_RUN`` non-starters, matched from its start."""
    ranges: list[list[int]] = []
    for code in range(_LAST_SCANNED + 1):
        if unicodedata.combining(chr(code)):
            if ranges and ranges[-1][1] == code - 1:
                ranges[-1][1] = code
            else:
                ranges.append([code, code])
    members = "".join(re.escape(chr(a)) + (f"-{re.escape(chr(b))}" if b > a else "") for a, b in ranges)
    return re.compile(f"(?<![{members}])[{members}]{{{STREAM_SAFE_RUN + 1},}}")


def stream_safe(text: str) -> str:
    """``text`` with a grapheme joiner after every ``STREAM_SAFE_RUN`` non-starters in a row.

    Linear in ``len(text)``; text without such a run (all real text) comes back unchanged.
    """
    if text.isascii():
        return text

    def split(match: re.Match) -> str:
        run = match.group()
        return _GRAPHEME_JOINER.join(run[i : i + STREAM_SAFE_RUN] for i in range(0, len(run), STREAM_SAFE_RUN))

    return _long_runs().sub(split, text)


def normalize_text(text: str) -> str:
    """Normalize text for hashing and chunking: NFC, ``\\n`` line ends, trimmed lines and blanks.

    Linear in ``len(text)``: text that is not in NFC yet has its runs of more than 30 combining
    marks split first (``stream_safe``). ``unicodedata.is_normalized`` is linear too: it normalizes
    only text it cannot tell at once, which is then in canonical order (nothing to sort).
    """
    if not unicodedata.is_normalized("NFC", text):
        text = unicodedata.normalize("NFC", stream_safe(text))
    text = text.replace("\r\n", "\n").replace("\r", "\n")
    text = text.replace("\x00", "")
    lines = [line.rstrip() for line in text.split("\n")]
    text = "\n".join(lines)
    text = re.sub(r"\n{3,}", "\n\n", text)
    return text.strip()


# How many times over its text a document's headings may scan it when they are not where they
# should be (``locate_sections``): past it, a heading that is not a line of its own is left out.
_MISSED_SCANS = 8


def locate_sections(text: str, headings: list[str], *, whole_lines: bool = False) -> list[Section]:
    """Sections for ``headings`` (in reading order) found in the normalized ``text``.

    Each heading, normalized like the text, is looked for after the previous one found; one not
    found is left out. With ``whole_lines`` a heading is first looked for as a line (or lines) of
    its own (readers that put every heading on its own line), so a mention of it in the text
    before is not taken for it; that look-up goes through an index of the text's lines. Else, or
    when it is not there, the heading is looked for anywhere in the text after the previous one.

    Linear in ``len(text)`` and the headings' length: the searches for headings that are not
    found may scan the text ``_MISSED_SCANS`` times in all, after which such headings are left out.
    """
    sections: list[Section] = []
    cursor = 0
    wanted = [normalize_text(heading) for heading in headings]
    lines = _HeadingLines(text, wanted) if whole_lines else None
    budget = _MISSED_SCANS * (len(text) + 1)
    for heading in wanted:
        if not heading:
            continue
        position = -1
        if lines:
            position, spent = lines.find(heading, cursor, budget=budget)
            budget -= spent
        if position < 0 and budget > 0:
            position = text.find(heading, cursor)
            if position < 0:
                budget -= len(text) - cursor + 1
        if position >= 0:
            sections.append(Section(heading=heading, start=position))
            cursor = position + len(heading)
    return sections


class _HeadingLines:
    """Where each heading's first line stands as a line of ``text``, for ``locate_sections``."""

    def __init__(self, text: str, headings: list[str]):
        self.text = text
        first_lines = {heading.split("\n", 1)[0] for heading in headings if heading}
        self.starts: dict[str, list[int]] = {}
        position = 0
        for line in text.split("\n"):
            if line in first_lines:
                self.starts.setdefault(line, []).append(position)
            position += len(line) + 1

    def find(self, heading: str, cursor: int, *, budget: int) -> tuple[int, int]:
        """(Where ``heading`` stands as whole lines at or after ``cursor``, or -1; the characters
        compared at the lines that only begin like it, at most about ``budget``).

        A one-line heading is found at once; one of several lines is compared at each line that
        holds its first line."""
        starts = self.starts.get(heading.split("\n", 1)[0], [])
        spent = 0
        for index in range(bisect.bisect_left(starts, cursor), len(starts)):
            start, end = starts[index], starts[index] + len(heading)
            if self.text.startswith(heading, start) and (end == len(self.text) or self.text[end] == "\n"):
                return start, spent
            spent += len(heading)
            if spent >= budget:
                break
        return -1, spent
