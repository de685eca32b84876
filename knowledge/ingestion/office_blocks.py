"""What the office and e-book readers (``knowledge.ingestion.office``, ``knowledge.ingestion.epub``)
collect, and how it becomes a ``ReadDocument``.

A reader fills a list of blocks (headings, paragraphs, tables, pictures' text) in reading order,
counted as they come (``Blocks``), and says what it found besides (``Parsed``). ``document_from``
normalizes each block and joins them with blank lines; as it knows where each block lands, the
sections and a paged document's ``page_starts`` are exact offsets in the final text, which is
not normalized again (``normalize_text`` leaves it as it is).

A picture kept to be shown (``knowledge.ingestion.office_images``) rides on the block of its
``[Image: ...]`` text: ``document_from`` puts its PNG in ``ReadDocument.images`` and lists it in
``metadata["figures"]`` at its block's offsets, as the PDF reader lists its figures.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from core.errors import InvalidInput
from knowledge.ingestion.documents import ReadDocument, Section, normalize_text

# Titles that programs write for every file: not worth more than the file name.
_PLACEHOLDER_TITLES = {"powerpoint presentation", "presentation", "document", "untitled"}


@dataclass
class Block:
    """A heading or a piece of text, in reading order; ``page`` is the page (a slide) it is on,
    0 in a document without pages. A picture's block may carry its ``picture`` (a PNG) and
    ``figure``: ``{"caption", "width", "height"}`` (the PNG's pixels)."""

    text: str
    heading: bool = False
    page: int = 0
    picture: bytes | None = field(default=None, repr=False)
    figure: dict | None = None


@dataclass
class Parsed:
    """What a reader found besides its blocks: the document's own title, its first heading (for
    a title), its page count (a .pptx's slides; 0 when not paged) and metadata to keep."""

    meta_title: str
    first_heading: str
    pages: int = 0
    metadata: dict = field(default_factory=dict)


class Blocks(list):
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


def line(text: str) -> str:
    """``text`` on one line: runs of whitespace become one space, normalized like the document text."""
    return normalize_text(" ".join(str(text).split()))


def first_heading(blocks: list[Block]) -> str:
    """The text of the first heading among ``blocks``, or ""."""
    return next((block.text for block in blocks if block.heading and block.text), "")


def document_from(blocks: list[Block], parsed: Parsed, *, name: str, external_id: str, uri: str) -> ReadDocument:
    """The document of ``blocks``: each normalized, those with text joined by a blank line; the
    headings' sections and, when ``parsed.pages``, ``metadata["pages"]`` and
    ``["page_starts"]`` (where each page starts; a page without text starts where the next one
    does) at their offsets in that text. The blocks' pictures become ``images``, each listed in
    ``metadata["figures"]`` (``_figure``; only when there are any)."""
    pieces: list[str] = []
    sections: list[Section] = []
    page_offsets: dict[int, int] = {}
    images: list[bytes] = []
    figures: list[dict] = []
    position = 0
    for block in blocks:
        text = normalize_text(block.text)
        if not text:
            continue
        if pieces:
            position += 2  # the blank line before it
        if block.heading:
            sections.append(Section(heading=text, start=position))
        if block.page:
            page_offsets.setdefault(block.page, position)
        if block.picture and block.figure:
            figures.append(_figure(block, text, index=len(images), start=position))
            images.append(block.picture)
        pieces.append(text)
        position += len(text)
    text = "\n\n".join(pieces)
    metadata = dict(parsed.metadata)
    if parsed.pages:
        starts = [0] * parsed.pages
        following = len(text)
        for page in range(parsed.pages, 0, -1):
            following = starts[page - 1] = page_offsets.get(page, following)
        starts[0] = 0
        metadata.update(pages=parsed.pages, page_starts=starts)
    if figures:
        metadata["figures"] = figures
    meta_title = line(parsed.meta_title or "")
    if meta_title.lower() in _PLACEHOLDER_TITLES:
        meta_title = ""
    title = meta_title or parsed.first_heading or Path(name).stem
    return ReadDocument(
        external_id=external_id,
        uri=uri,
        title=title[:500],
        text=text,
        sections=sections,
        metadata=metadata,
        images=images,
    )


def _figure(block: Block, text: str, *, index: int, start: int) -> dict:
    """A kept picture as ``metadata["figures"]`` lists it: ``index`` (its place in
    ``ReadDocument.images`` and in the list), ``caption``, ``page`` (a .pptx's slide, else None),
    ``start``/``end`` (its normalized ``text``'s offsets in the document's text), ``marker`` (the
    first line of that text, ``[Image: ...``, what a passage holding it holds) and the PNG's
    ``width``/``height`` in pixels."""
    figure = block.figure or {}
    return {
        "index": index,
        "caption": figure.get("caption", ""),
        "page": block.page or None,
        "start": start,
        "end": start + len(text),
        "marker": text.split("\n", 1)[0],
        "width": figure.get("width", 0),
        "height": figure.get("height", 0),
    }
