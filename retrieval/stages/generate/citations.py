"""The citation safety net: every sentence of an explanation is cited, or marked unsupported; no LLM.

A small model forgets ``[n]`` markers, cites a passage that does not say the claim, or adds a
sentence of its own. This net runs on every LLM explanation (``citations_check``):

1. The explanation is split into claim sentences (``sentence_spans``: the splitting the support
   measure uses, ``retrieval.stages.score.support``).
2. The sentences and every sentence of every passage are embedded in one batch by the tenant's
   embedder (all-MiniLM-L6-v2 by default; Reimers & Gurevych 2019, Sentence-BERT).
3. A sentence without a valid ``[n]`` gets the passage holding its most similar sentence
   (cosine), when that similarity reaches ``SUPPORT_THRESHOLD``: the marker is written into the
   text (before the sentence's closing punctuation) and the sentence is flagged ``added``.
   Otherwise the sentence stays uncited and is marked unsupported. A sentence the model cited
   is checked too, against the lower ``CITED_THRESHOLD``: when no sentence of the passages it
   cites reaches it, it keeps its citations but is marked unsupported. A sentence about the
   passages themselves ("The passages do not say ...", ``PASSAGES_LACK``) is no claim: it
   needs no citation and is not marked.

This is the attribution-by-similarity idea of post-hoc citation (Gao et al. 2023, "RARR:
Researching and Revising What Language Models Say", and the sentence-level "citation recall"
of Gao et al. 2023, "Enabling Large Language Models to Generate Text with Citations"), with an
embedding similarity in place of an NLI model, so it runs on CPU in milliseconds.

``SUPPORT_THRESHOLD`` (0.5) and ``CITED_THRESHOLD`` (0.35) were measured with
all-MiniLM-L6-v2 on the test corpus's passages (``benchmarks/citation_threshold.py``): claims
the passages make in other words scored 0.60-0.93 against their sentence (one pronoun-only
claim, "Your manager must approve it.", 0.48); claims on another subject 0.07-0.27. Attaching a
citation the model did not make asks for 0.5; overruling one it made only happens below 0.35,
clear of both ranges (a citation is not taken away, the sentence is only marked). Claims on the passages' subject that the passages
do not make scored 0.53-0.59 and pass: an embedding measures topic, not entailment (the LLM
judge, ``retrieval.stages.score.judge``, is the check for that).

What counts as a sentence: the text is split into lines; bullet and heading marks are dropped;
the extractive answer's label line and introductory lines ending in ":" without a citation are
skipped; each line is split into sentences (``sentence_offsets``, blingfire); markers that open
a sentence belong to the sentence before (``... ten minutes. [1] Drain ...``). Sentences
without a letter or digit are skipped.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass, field

import numpy as np

from core.errors import UpstreamError
from knowledge.embedders import get_embedder
from knowledge.ingestion.splitters import sentence_offsets
from retrieval.stages.generate.extractive import DEGRADED_LABEL, LABEL
from retrieval.stages.pack import text_defang
from retrieval.types import Passage

logger = logging.getLogger(__name__)

SUPPORT_THRESHOLD = 0.5  # cosine, all-MiniLM-L6-v2; measured as told in the module docstring
CITED_THRESHOLD = 0.35  # below it, a sentence the model cited is marked unsupported
# A sentence about what the passages lack ("The passages do not mention ..."): not a claim.
PASSAGES_LACK = re.compile(
    r"\b(?:passages?|documents?|sources?|context)\b.*\b(?:do(?:es)? not|don['’]t|doesn['’]t|did not|didn['’]t)\b",
    re.IGNORECASE,
)
_CITATION = re.compile(r"\[(\d{1,3})\]")
_LEADING_MARKERS = re.compile(r"^\s*((?:\[\d{1,3}\]\s*)+)")
_BULLET = re.compile(r"^\s*(?:[-*•+]|#{1,6}|\d{1,3}[.)])\s+")
_WORD = re.compile(r"\w")
_SPACE_BEFORE_PUNCTUATION = re.compile(r"\s+([.,;:!?])")
_LABELS = frozenset({LABEL, DEGRADED_LABEL})


@dataclass
class Span:
    """One claim sentence of an answer: ``text`` without markers (whitespace squashed), its
    cited ``numbers`` (distinct, in order, not checked against the passages) and where it sits
    in the answer: ``start``/``end`` character offsets of the sentence and its own markers."""

    text: str
    numbers: list[int]
    start: int
    end: int


@dataclass
class Checked:
    """What the net made of an explanation (``citations_check``).

    ``text``: the explanation with the markers the net added. ``sentences``: per claim
    sentence ``{"text", "citations": [n...], "supported", "added"}``. ``coverage``: share of
    sentences with at least one citation, in [0, 1] (0.0 without sentences). ``unsupported``:
    the sentences no passage supports, as in ``sentences``.
    """

    text: str
    sentences: list[dict] = field(default_factory=list)
    coverage: float = 0.0
    unsupported: list[str] = field(default_factory=list)


def sentence_spans(text: str) -> list[Span]:
    """The claim sentences of an answer's ``text`` with their offsets (module docstring)."""
    spans: list[Span] = []
    offset = 0
    for raw_line in text.splitlines(keepends=True):
        line_start = offset
        offset += len(raw_line)
        bullet = _BULLET.match(raw_line)
        body = raw_line[bullet.end() if bullet else 0 :]
        base = line_start + (bullet.end() if bullet else 0) + (len(body) - len(body.lstrip()))
        line = body.strip()
        if not line or line in _LABELS:
            continue
        if line.endswith(":") and not _CITATION.search(line):
            continue
        for a, b in sentence_offsets(line):
            raw = line[a:b]
            start = a + len(raw) - len(raw.lstrip())
            sentence = raw.strip()
            leading = _LEADING_MARKERS.match(sentence)
            if leading and spans:
                # Markers that open a sentence close the one before it ("... boil. [1] Drain").
                previous = spans[-1]
                previous.numbers = list(dict.fromkeys([*previous.numbers, *_numbers(leading.group(1))]))
                previous.end = base + start + len(leading.group(0).rstrip())
                start += leading.end()
                sentence = sentence[leading.end() :]
            plain = _SPACE_BEFORE_PUNCTUATION.sub(r"\1", " ".join(_CITATION.sub(" ", sentence).split()))
            if not _WORD.search(plain):
                continue
            spans.append(Span(plain, _numbers(sentence), base + start, base + start + len(sentence)))
    return spans


def answer_sentences(text: str) -> list[tuple[str, list[int]]]:
    """The claim sentences of an answer's ``text``: ``[(sentence without markers, cited numbers)]``."""
    return [(span.text, span.numbers) for span in sentence_spans(text)]


def _numbers(text: str) -> list[int]:
    return list(dict.fromkeys(int(n) for n in _CITATION.findall(text)))


def passage_sentences(passage: Passage) -> list[str]:
    """The sentences of a passage's (defanged) text, whitespace squashed; the whole text if none."""
    text = text_defang(passage.text)
    found = [" ".join(text[a:b].split()) for a, b in sentence_offsets(text)]
    found = [s for s in found if _WORD.search(s)]
    return found or ([" ".join(text.split())] if text.strip() else [])


def citations_check(
    text: str,
    passages: list[Passage],
    *,
    embedder,
    threshold: float = SUPPORT_THRESHOLD,
    cited_threshold: float = CITED_THRESHOLD,
) -> Checked:
    """Cite each uncited sentence of ``text`` by its best-supporting passage, or mark it unsupported.

    ``text``: an explanation with ``[n]`` markers, numbered like ``passages`` (1-based; a number
    outside them is no citation). ``embedder``: an embedder key (``get_embedder``) or an object
    with ``embed(texts) -> ndarray`` of unit-length rows. ``threshold`` (``cited_threshold`` for
    a sentence the model cited): the least cosine similarity, in [-1, 1], between a sentence and
    a passage sentence that counts as support. One embedding call for all sentences; none when
    ``text`` has no sentence. Without an embedder (``None``), or when it fails
    (``UpstreamError``), nothing is added: cited sentences are taken as the model cited them,
    uncited ones are unsupported. See the module docstring for the method.
    """
    spans = sentence_spans(text)
    if not spans:
        return Checked(text=text)
    for span in spans:
        span.numbers = [n for n in span.numbers if 1 <= n <= len(passages)]
    best = _best_support(spans, passages, embedder=embedder)
    sentences: list[dict] = []
    inserts: list[tuple[int, str]] = []
    for i, span in enumerate(spans):
        entry = {"text": span.text, "citations": list(span.numbers), "supported": bool(span.numbers), "added": False}
        if best is not None:
            similarity = best[i]
            if span.numbers:
                entry["supported"] = bool(max(similarity[n - 1] for n in span.numbers) >= cited_threshold)
            elif similarity.size and similarity.max() >= threshold:
                n = int(np.argmax(similarity)) + 1
                entry.update(citations=[n], supported=True, added=True)
                inserts.append((_marker_position(text, span), f" [{n}]"))
        if not entry["citations"] and PASSAGES_LACK.search(span.text):
            entry["supported"] = True  # about the passages, not a claim from them
        sentences.append(entry)
    for position, marker in sorted(inserts, reverse=True):
        text = text[:position] + marker + text[position:]
    cited = sum(1 for entry in sentences if entry["citations"])
    return Checked(
        text=text,
        sentences=sentences,
        coverage=round(cited / len(sentences), 4),
        unsupported=[entry["text"] for entry in sentences if not entry["supported"]],
    )


def _best_support(spans: list[Span], passages: list[Passage], *, embedder) -> np.ndarray | None:
    """Per span, per passage: the best cosine between the span and a sentence of the passage
    (shape ``(len(spans), len(passages))``; -1.0 for a passage without sentences); ``None``
    when there is no embedder or it failed."""
    if embedder is None:
        return None
    texts = [span.text for span in spans]
    ranges: list[tuple[int, int]] = []
    for passage in passages:
        own = passage_sentences(passage)
        ranges.append((len(texts), len(texts) + len(own)))
        texts.extend(own)
    try:
        model = get_embedder(embedder) if isinstance(embedder, str) else embedder
        vectors = np.asarray(model.embed(texts), dtype=np.float32)
    except UpstreamError as exc:
        logger.warning("Citation check without embeddings: %s", exc)
        return None
    similarity = vectors[len(spans) :] @ vectors[: len(spans)].T  # (passage sentences, spans)
    best = np.full((len(spans), len(passages)), -1.0, dtype=np.float32)
    for j, (a, b) in enumerate(ranges):
        if b > a:
            best[:, j] = similarity[a - len(spans) : b - len(spans)].max(axis=0)
    return best


def _marker_position(text: str, span: Span) -> int:
    """Where a marker for ``span`` goes: before its closing punctuation ("... hot [2]."), else at its end."""
    end = span.end
    while end > span.start and text[end - 1] in "\"'”’)":
        end -= 1
    if end > span.start and text[end - 1] in ".!?;:":
        return end - 1
    return span.end
