"""Splitters: cut a ``ReadDocument`` into chunk spans.

Three splitters, as in the RAG quality design (seed ``rag-quality-design.txt``):

* ``MaxTokenSplitter`` packs whole sentences up to ``max_tokens`` (tiktoken ``cl100k_base``)
  with ``overlap_tokens`` of trailing sentences repeated at the start of the next chunk, and
  never lets a chunk straddle two sections;
* ``SentenceSplitter`` makes one chunk per sentence;
* ``SingleChunkSplitter`` makes the whole document one chunk.

Sentences come from paragraphs (blank-line separated) cut by BlingFire's sentence breaker.
"""

from __future__ import annotations

import bisect
import re
from dataclasses import dataclass
from typing import Protocol

import blingfire

from knowledge.ingestion.readers import ReadDocument
from llm.tokenizer import count_tokens, get_encoding


@dataclass(frozen=True)
class Span:
    """A chunk before storage: ``text == document_text[start:end]``; ``heading`` is its section path."""

    text: str
    start: int
    end: int
    token_count: int
    heading: str


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
    """One chunk per sentence."""

    name = "sentence"

    def split(self, document: ReadDocument) -> list[Span]:
        sections = _Sections(document)
        text = document.text
        return [Span(text[a:b], a, b, count_tokens(text[a:b]), sections.heading(a)) for a, b in sentence_offsets(text)]


class MaxTokenSplitter:
    """Sentence-aware chunks of at most ``max_tokens`` tokens with ``overlap_tokens`` of overlap.

    The budget counts each sentence's tokens; the whitespace joining sentences can add a token or
    two to the stored ``token_count``. A section shorter than ``min_tokens`` (a lone heading)
    joins the next section's chunk. A sentence longer than ``max_tokens`` is cut at token boundaries. Raises ``ValueError`` when
    ``overlap_tokens >= max_tokens`` or ``max_tokens < 16``.
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

    def _units(self, text: str) -> list[tuple[int, int, int]]:
        """Sentences as ``(start, end, tokens)``, long ones cut into ``max_tokens`` pieces."""
        encoding = get_encoding()
        units = []
        for a, b in sentence_offsets(text):
            tokens = encoding.encode_ordinary(text[a:b])
            if len(tokens) <= self.max_tokens:
                units.append((a, b, len(tokens)))
                continue
            cursor = a
            for i in range(0, len(tokens), self.max_tokens):
                piece = encoding.decode(tokens[i : i + self.max_tokens])
                found = text.find(piece.strip()[:20], cursor) if piece.strip() else -1
                start = found if found >= 0 else cursor
                end = min(b, start + len(piece.rstrip())) if i + self.max_tokens < len(tokens) else b
                if end > start:
                    units.append((start, end, len(tokens[i : i + self.max_tokens])))
                cursor = max(cursor, end)
        return units

    def split(self, document: ReadDocument) -> list[Span]:
        text = document.text
        sections = _Sections(document)
        spans: list[Span] = []
        current: list[tuple[int, int, int]] = []

        def emit() -> None:
            start, end = current[0][0], current[-1][1]
            spans.append(
                Span(
                    text[start:end],
                    start,
                    end,
                    count_tokens(text[start:end]),
                    sections.heading(start),
                )
            )

        for unit in self._units(text):
            same_section = (
                not current
                or sections.index(unit[0]) == sections.index(current[0][0])
                or sum(u[2] for u in current) < self.min_tokens  # a lone heading joins what follows
            )
            if current and (not same_section or sum(u[2] for u in current) + unit[2] > self.max_tokens):
                emit()
                carried: list[tuple[int, int, int]] = []
                if same_section:
                    for previous in reversed(current):
                        if sum(u[2] for u in carried) + previous[2] > self.overlap_tokens:
                            break
                        carried.insert(0, previous)
                    if sum(u[2] for u in carried) + unit[2] > self.max_tokens:
                        carried = []
                current = carried
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
