"""Splitters: cut a ``ReadDocument`` into chunk spans.

Three splitters, as in the RAG quality design (seed ``rag-quality-design.txt``):

* ``MaxTokenSplitter`` packs whole sentences up to ``max_tokens`` (tiktoken ``cl100k_base``)
  with ``overlap_tokens`` of trailing sentences repeated at the start of the next chunk, and
  never lets a chunk straddle two sections;
* ``SentenceSplitter`` makes one chunk per sentence;
* ``SingleChunkSplitter`` makes the whole document one chunk.

Sentences come from paragraphs (blank-line separated) cut by BlingFire's sentence breaker.
Markdown tables (``knowledge.ingestion.tables``: the readers write office, HTML and EPUB tables
so) are not cut into sentences: ``MaxTokenSplitter`` keeps a table that fits in a chunk whole and
cuts a longer one between rows, each part repeating the table's caption and header row, so a
row's chunk says what its columns mean; a row is cut inside only when it alone is longer than a
chunk. ``SentenceSplitter`` makes one chunk per row, each with its header.
"""

from __future__ import annotations

import bisect
import re
from dataclasses import dataclass
from typing import NamedTuple, Protocol

import blingfire

from knowledge.ingestion.readers import ReadDocument
from knowledge.ingestion.tables import TableSpan, find_tables
from llm.tokenizer import count_tokens, get_encoding


@dataclass(frozen=True)
class Span:
    """A chunk before storage: ``text == document_text[start:end]``, except for the second and
    later parts of a table cut between rows, whose text is the table's caption and header lines
    (repeated), a line break, then ``document_text[start:end]`` (its rows); ``heading`` is its
    section path."""

    text: str
    start: int
    end: int
    token_count: int
    heading: str


class _Unit(NamedTuple):
    """What a splitter packs: a sentence, a whole table or a part of a long table (``start``,
    ``end``, ``tokens``). A table part stands ``alone`` in its chunk, after its ``prefix`` (the
    repeated caption and header, with the line break that ends them)."""

    start: int
    end: int
    tokens: int
    prefix: str = ""
    alone: bool = False


class Splitter(Protocol):
    name: str

    def split(self, document: ReadDocument) -> list[Span]:
        """Return the document's spans in reading order."""


_PARAGRAPH_BREAK = re.compile(r"\n\s*\n")


def sentence_offsets(text: str) -> list[tuple[int, int]]:
    """Character offsets ``(start, end)`` of each sentence of ``text``, in order.

    Paragraphs (blank-line separated) never share a sentence.
    """
    offsets: list[tuple[int, int]] = []
    position = 0
    for match in [*_PARAGRAPH_BREAK.finditer(text), None]:
        end = match.start() if match else len(text)
        paragraph = text[position:end]
        if paragraph.strip():
            _, spans = blingfire.text_to_sentences_and_offsets(paragraph)
            offsets.extend((position + a, position + b) for a, b in spans if paragraph[a:b].strip())
        position = match.end() if match else len(text)
    return offsets


def sentences_split(text: str) -> list[str]:
    """The sentences of ``text`` in order, as ``sentence_offsets`` cuts them but without their
    offsets: BlingFire's C sentence breaker alone, several times faster than mapping offsets back
    (used at question time, e.g. by the extractive answer). Whitespace inside a sentence may be
    normalised."""
    sentences: list[str] = []
    for paragraph in _PARAGRAPH_BREAK.split(text):
        if paragraph.strip():
            sentences.extend(s for s in blingfire.text_to_sentences(paragraph).split("\n") if s.strip())
    return sentences


class _Sections:
    """Maps a character offset to the heading path of the section it falls in."""

    def __init__(self, document: ReadDocument):
        self.title = document.title
        self.starts = [s.start for s in document.sections]
        self.headings = [s.heading for s in document.sections]

    def index(self, offset: int) -> int:
        return bisect.bisect_right(self.starts, offset) - 1

    def heading(self, offset: int) -> str:
        i = self.index(offset)
        if i < 0 or self.headings[i] == self.title:
            return self.title
        return f"{self.title} › {self.headings[i]}"[:500]


class SingleChunkSplitter:
    """The whole document as one chunk."""

    name = "single"

    def split(self, document: ReadDocument) -> list[Span]:
        text = document.text
        return [Span(text, 0, len(text), count_tokens(text), document.title[:500])]


class SentenceSplitter:
    """One chunk per sentence, and per table row (after its caption and header)."""

    name = "sentence"

    def split(self, document: ReadDocument) -> list[Span]:
        sections = _Sections(document)
        text = document.text
        spans = []
        for unit in _table_aware(text, _sentence_units, _row_units):
            piece = unit.prefix + text[unit.start : unit.end]
            spans.append(Span(piece, unit.start, unit.end, count_tokens(piece), sections.heading(unit.start)))
        return spans


def _sentence_units(text: str, start: int, end: int) -> list[_Unit]:
    """The sentences of ``text[start:end]`` (token counts are not needed: 0)."""
    return [_Unit(start + a, start + b, 0) for a, b in sentence_offsets(text[start:end])]


def _row_units(text: str, table: TableSpan) -> list[_Unit]:
    """A table's rows, one unit each: the first from the table's start (its caption and header
    are there), the others after the repeated caption and header."""
    if not table.rows:
        return [_Unit(table.start, table.end, 0)]
    prefix = table.context(text) + "\n"
    first, *rest = table.rows
    return [_Unit(table.start, first[1], 0, alone=True)] + [_Unit(a, b, 0, prefix, True) for a, b in rest]


def _table_aware(text: str, sentences, tables) -> list[_Unit]:
    """The units of ``text``: ``sentences(text, start, end)`` between its Markdown tables and
    ``tables(text, table)`` for each table."""
    units: list[_Unit] = []
    position = 0
    for table in find_tables(text):
        units.extend(sentences(text, position, table.start))
        units.extend(tables(text, table))
        position = table.end
    units.extend(sentences(text, position, len(text)))
    return units


class MaxTokenSplitter:
    """Sentence-aware chunks of at most ``max_tokens`` tokens with ``overlap_tokens`` of overlap.

    The budget counts each sentence's tokens; the whitespace joining sentences can add a token or
    two to the stored ``token_count``. A section shorter than ``min_tokens`` (a lone heading)
    joins the next section's chunk. A sentence longer than ``max_tokens`` is cut at token boundaries. Raises ``ValueError`` when
    ``overlap_tokens >= max_tokens`` or ``max_tokens < 16``. A Markdown table that fits is packed
    whole like a sentence; a longer one is cut between rows into chunks of their own, each
    repeating its caption and header (``_table``); overlap never crosses into or out of them.
    """

    name = "max_tokens"

    # 160 cl100k tokens plus a heading fit all-MiniLM-L6-v2's 256-word-piece window; measured
    # better than 128, 200 and 256 for dense retrieval on BioASQ and HotpotQA (docs/retrieval.md).
    def __init__(self, max_tokens: int = 160, overlap_tokens: int = 30):
        if max_tokens < 16:
            raise ValueError("max_tokens must be at least 16")
        if not 0 <= overlap_tokens < max_tokens:
            raise ValueError("overlap_tokens must be in [0, max_tokens)")
        self.max_tokens = max_tokens
        self.overlap_tokens = overlap_tokens
        self.min_tokens = min(32, max_tokens // 4)

    def _units(self, text: str) -> list[_Unit]:
        """Sentences (long ones cut into ``max_tokens`` pieces) and tables (``_table``)."""
        return _table_aware(text, self._sentences, self._table)

    def _sentences(self, text: str, start: int, end: int) -> list[_Unit]:
        units: list[_Unit] = []
        for a, b in sentence_offsets(text[start:end]):
            units.extend(self._pieces(text, start + a, start + b, self.max_tokens))
        return units

    def _pieces(self, text: str, a: int, b: int, limit: int, prefix: str = "", extra: int = 0) -> list[_Unit]:
        """``text[a:b]`` as one unit if it has at most ``limit`` tokens, else cut at token
        boundaries into pieces of ``limit``; a ``prefix`` (of ``extra`` tokens) makes them table
        parts."""
        encoding = get_encoding()
        tokens = encoding.encode_ordinary(text[a:b])
        if len(tokens) <= limit:
            return [_Unit(a, b, len(tokens) + extra, prefix, bool(prefix))]
        units = []
        cursor = a
        for i in range(0, len(tokens), limit):
            piece = encoding.decode(tokens[i : i + limit])
            found = text.find(piece.strip()[:20], cursor, b) if piece.strip() else -1
            start = found if found >= 0 else cursor
            end = min(b, start + len(piece.rstrip())) if i + limit < len(tokens) else b
            if end > start:
                units.append(_Unit(start, end, len(tokens[i : i + limit]) + extra, prefix, bool(prefix)))
            cursor = max(cursor, end)
        return units

    def _table(self, text: str, table: TableSpan) -> list[_Unit]:
        """A table that fits in a chunk as one unit; a longer one in parts of whole rows, each
        after the table's caption and header (at most half a chunk: the caption goes first, then
        the header is cut), the first from the table's start, where they stand."""
        encoding = get_encoding()
        whole = len(encoding.encode_ordinary(text[table.start : table.end]))
        if whole <= self.max_tokens:
            return [_Unit(table.start, table.end, whole)]
        if not table.rows:  # a header longer than a chunk
            return self._pieces(text, table.start, table.end, self.max_tokens)
        context = table.context(text)
        tokens = encoding.encode_ordinary(context)
        if table.caption and len(tokens) > self.max_tokens // 2:
            context = context.split("\n", 1)[1]
            tokens = encoding.encode_ordinary(context)
        if len(tokens) > self.max_tokens // 2:
            context = encoding.decode(tokens[: self.max_tokens // 2]).rstrip()
            tokens = encoding.encode_ordinary(context)
        prefix, extra = context + "\n", len(tokens) + 1
        budget = self.max_tokens - extra
        units: list[_Unit] = []
        group: list[tuple[int, int, int]] = []

        def flush() -> None:
            if group:
                units.append(_Unit(group[0][0], group[-1][1], extra + sum(g[2] for g in group), prefix, True))
                group.clear()

        for a, b in table.rows:
            row_tokens = len(encoding.encode_ordinary(text[a:b])) + 1
            if row_tokens > budget:
                flush()
                units.extend(self._pieces(text, a, b, budget, prefix, extra))
                continue
            if sum(g[2] for g in group) + row_tokens > budget:
                flush()
            group.append((a, b, row_tokens))
        flush()
        first = units[0]
        units[0] = _Unit(table.start, first.end, first.tokens, "", True)
        return units

    def split(self, document: ReadDocument) -> list[Span]:
        text = document.text
        sections = _Sections(document)
        spans: list[Span] = []
        current: list[_Unit] = []
        carried_count = 0  # how many units of ``current`` the previous chunk holds too

        def emit() -> None:
            start, end = current[0].start, current[-1].end
            piece = current[0].prefix + text[start:end]
            spans.append(Span(piece, start, end, count_tokens(piece), sections.heading(start)))

        for unit in self._units(text):
            if unit.alone:  # a part of a long table: a chunk of its own
                if len(current) > carried_count and (unit.prefix or sum(u.tokens for u in current) >= self.min_tokens):
                    emit()
                    current = []
                elif len(current) == carried_count:
                    current = []  # only overlap: already in the previous chunk
                current.append(unit)  # a lone heading before the table's first part joins it
                emit()
                current, carried_count = [], 0
                continue
            same_section = (
                not current
                or sections.index(unit.start) == sections.index(current[0].start)
                or sum(u.tokens for u in current) < self.min_tokens  # a lone heading joins what follows
            )
            if current and (not same_section or sum(u.tokens for u in current) + unit.tokens > self.max_tokens):
                emit()
                carried: list[_Unit] = []
                if same_section:
                    for previous in reversed(current):
                        if sum(u.tokens for u in carried) + previous.tokens > self.overlap_tokens:
                            break
                        carried.insert(0, previous)
                    if sum(u.tokens for u in carried) + unit.tokens > self.max_tokens:
                        carried = []
                current, carried_count = carried, len(carried)
            current.append(unit)
        if current:
            emit()
        return spans


SPLITTERS = {
    "max_tokens": MaxTokenSplitter,
    "sentence": SentenceSplitter,
    "single": SingleChunkSplitter,
}


def get_splitter(name: str = "max_tokens", **options) -> Splitter:
    """Build the splitter called ``name`` (max_tokens, sentence or single); ``ValueError`` otherwise."""
    try:
        return SPLITTERS[name](**options)
    except KeyError:
        raise ValueError(f"Unknown splitter {name!r}; use one of {', '.join(SPLITTERS)}.") from None
