"""What a reader gives: a ``ReadDocument`` (title, normalized text, sections), and the helpers every
reader shares (text normalization, finding headings' offsets). ``knowledge.ingestion.readers`` and
``knowledge.ingestion.office`` build on it.
"""

from __future__ import annotations

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
    ``sections`` are in ascending ``start`` order.
    """

    external_id: str
    title: str
    text: str
    uri: str = ""
    published_at: datetime | None = None
    metadata: dict = field(default_factory=dict)
    sections: list[Section] = field(default_factory=list)


def normalize_text(text: str) -> str:
    """Normalize text for hashing and chunking: NFC, ``\\n`` line ends, trimmed lines and blanks."""
    text = unicodedata.normalize("NFC", text).replace("\r\n", "\n").replace("\r", "\n")
    text = text.replace("\x00", "")
    lines = [line.rstrip() for line in text.split("\n")]
    text = "\n".join(lines)
    text = re.sub(r"\n{3,}", "\n\n", text)
    return text.strip()


def locate_sections(text: str, headings: list[str], *, whole_lines: bool = False) -> list[Section]:
    """Sections for ``headings`` (in reading order) found in the normalized ``text``.

    Each heading is looked for after the previous one found; one not found is left out. With
    ``whole_lines`` a heading is first looked for as a line of its own (readers that put every
    heading on its own line), so a mention of it in the text before is not taken for it.
    """
    sections: list[Section] = []
    cursor = 0
    for heading in headings:
        position = -1
        if heading and whole_lines:
            match = re.compile(rf"^{re.escape(heading)}$", re.MULTILINE).search(text, cursor)
            position = match.start() if match else -1
        if heading and position < 0:
            position = text.find(heading, cursor)
        if position >= 0:
            sections.append(Section(heading=heading, start=position))
            cursor = position + len(heading)
    return sections
