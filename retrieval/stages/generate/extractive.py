"""Extractive answers: the passage sentences that best match the question, each cited; no LLM.

No sentence is embedded at question time. Each candidate sentence is scored by BM25 (Robertson
& Zaragoza 2009, "The Probabilistic Relevance Framework: BM25 and Beyond"; k1 = 1.2, b = 0.75)
against the question, with the candidate sentences of the passages as the collection (their
document frequencies and mean length), normalised by the best sentence's score, plus a prior
for the passage's rank. A sentence holding the number or date the question asks for gets a bonus.
The short answer is a span of the best sentences when the question asks for one
(``retrieval.stages.generate.spans``), else the best sentence. Texts are defanged
first (``retrieval.stages.pack.text_defang``): a document's own ``[n]`` never becomes a
citation, and nothing a passage says is acted on; it is only quoted.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from dataclasses import dataclass

from knowledge.ingestion.splitters import sentences_split
from retrieval.stages.generate.spans import (
    Sentence,
    answer_bearing,
    answer_type,
    key_terms,
    passage_subject,
    question_kind,
    span_answer,
    terms,
)
from retrieval.stages.pack import text_defang
from retrieval.types import Answer, Citation, Passage

LABEL = "Extractive answer (no LLM configured); the most relevant passages say:"
DEGRADED_LABEL = "Extractive answer (the LLM could not answer); the most relevant passages say:"
SHORT_WORDS = 30  # the extractive short answer's most words when it is a sentence
K1, B = 1.2, 0.75  # BM25 term-frequency saturation and length normalisation
TYPE_WEIGHT = 0.3  # bonus of a sentence holding the number or date a question asks for
RANK_WEIGHT = 0.3  # weight of the passage-rank prior 1 / (n + 1) beside the normalised BM25 in [0, 1]
# A fact question's headline is shown when its sentence holds at least this share of the question's
# key terms (measured on the demo's 30 questions, benchmarks/demo_headlines.py; docs/answers.md).
HEADLINE_MIN_CONFIDENCE = 0.25
LEAD_CHARS = 1200  # the lead paragraph's most characters
_BLOCK_BREAK = re.compile(r"\n\s*\n")


@dataclass(frozen=True)
class Candidate:
    """A sentence that may be quoted: passage number ``n`` (1-based), its text, its score,
    ``at``, its place in reading order among all candidates, and ``subject``, the entity its
    passage is about (``spans.passage_subject``)."""

    n: int
    text: str
    score: float
    at: int
    subject: str = ""


def sentences_rank(question: str, passages: list[Passage]) -> list[Candidate]:
    """Every candidate sentence of ``passages``, best first, scored against ``question``.

    Sentences of 7-80 words of prose paragraphs (not indented code blocks) that do not look like
    headings are candidates; when none qualify,
    each passage's first 400 characters are. ``score`` = BM25 of the sentence against the
    question's terms (collection: these candidates), divided by the best such score (so in
    [0, 1]; 0 for all when no term matches), plus ``RANK_WEIGHT / (n + 1)`` for passage ``n``,
    plus ``TYPE_WEIGHT`` when the question asks for a number or a date and the sentence holds one
    the question does not state (``spans.answer_bearing``). Ties keep reading order. Pure Python:
    about 2 ms for five passages on one core, nothing embedded.
    """
    found: list[tuple[int, str]] = []
    subjects: dict[int, str] = {}
    for n, passage in enumerate(passages, start=1):
        text = text_defang(passage.text)
        subjects[n] = passage_subject(text)
        prose = "\n\n".join(b for b in _BLOCK_BREAK.split(text) if b.strip() and not b.startswith((" ", "\t")))
        for sentence in sentences_split(prose):
            sentence = " ".join(sentence.split())
            words = len(sentence.split())
            looks_like_heading = words < 8 and not sentence.endswith((".", "!", "?", ":", ")"))
            if 7 <= words <= 80 and not looks_like_heading:
                found.append((n, sentence))
    if not found:
        found = [(n, " ".join(text_defang(p.text).split())[:400]) for n, p in enumerate(passages, start=1)]
    bags = [Counter(terms(sentence, unique=False)) for _, sentence in found]
    lexical = _bm25(set(terms(question)), bags)
    best = max(lexical, default=0.0) or 1.0
    kind = answer_type(question)
    scored = [
        Candidate(
            n=n,
            text=sentence,
            score=value / best + RANK_WEIGHT / (n + 1) + TYPE_WEIGHT * answer_bearing(sentence, kind, question),
            at=at,
            subject=subjects[n],
        )
        for at, ((n, sentence), value) in enumerate(zip(found, lexical, strict=True))
    ]
    order = sorted(range(len(scored)), key=lambda i: -scored[i].score)
    return [scored[i] for i in order]


def _bm25(query: set[str], bags: list[Counter]) -> list[float]:
    """BM25 of each bag of terms against ``query``, the bags being the whole collection."""
    if not bags:
        return []
    lengths = [sum(bag.values()) for bag in bags]
    mean_length = sum(lengths) / len(bags) or 1.0
    frequency = Counter(term for bag in bags for term in bag.keys() & query)
    idf = {t: math.log(1 + (len(bags) - f + 0.5) / (f + 0.5)) for t, f in frequency.items()}
    scores = []
    for bag, length in zip(bags, lengths, strict=True):
        norm = K1 * (1 - B + B * length / mean_length)
        scores.append(sum(idf[t] * bag[t] * (K1 + 1) / (bag[t] + norm) for t in idf if t in bag))
    return scores


def answer_extract(
    question: str, passages: list[Passage], *, embedder: str | None = None, sentences: int = 3, label: str = LABEL
) -> Answer:
    """Up to ``sentences`` sentences of ``passages`` most relevant to ``question``, each cited ``[n]``.

    Sentences are chosen by ``sentences_rank`` (lexical; nothing is embedded, so ``embedder``
    is accepted for the callers' sake and unused) and quoted in passage order. ``passages``
    must not be empty (``ValueError``). The short answer is ``spans.span_answer``'s span of the
    best sentences when the question asks for a name, number, date or one of two named options
    and one is found; otherwise the best sentence (its first ``SHORT_WORDS`` words and "…" when
    longer). Each quoted sentence is one entry of ``sentences``, cited and supported (coverage 1.0).
    """
    if not passages:
        raise ValueError("answer_extract needs at least one passage.")
    ranked = sentences_rank(question, passages)
    chosen = sorted(ranked[:sentences], key=lambda c: c.at)
    used: list[int] = []
    lines = []
    quoted = []
    for candidate in chosen:
        lines.append(f"{candidate.text} [{candidate.n}]")
        quoted.append({"text": candidate.text, "citations": [candidate.n], "supported": True, "added": False})
        if candidate.n not in used:
            used.append(candidate.n)
    text = label + "\n" + "\n".join(f"- {line}" for line in lines)
    headline = headline_choose(question, passages, ranked)
    lead = None if headline.shown else lead_passage(question, passages, ranked)
    if lead and lead["n"] not in used:
        used.append(lead["n"])
    return Answer(
        question=question,
        text=text,
        mode="extractive",
        citations=[Citation(n=n, passage=passages[n - 1]) for n in sorted(used)],
        short_answer=headline.text if headline.shown else "",
        sentences=quoted,
        citation_coverage=1.0,
        lead=lead,
    )


@dataclass(frozen=True)
class Headline:
    """The short answer an extractive answer may lead with: its ``text`` (a span or the best
    sentence, shortened), the passage ``n`` it comes from, the question's ``kind``
    (``spans.question_kind``), its ``confidence`` in [0, 1] (``headline_confidence``) and whether
    it is ``shown``."""

    text: str
    n: int
    kind: str
    confidence: float
    shown: bool


def headline_choose(question: str, passages: list[Passage], ranked: list[Candidate]) -> Headline:
    """The headline for ``question`` from the ranked sentences (``sentences_rank``) of ``passages``.

    Its text is ``spans.span_answer``'s span when the question asks for a name, number, date or
    option and one is found (its sentence: the best one holding it; a word capitalised only because
    it opens its sentence, written in lower case elsewhere, does not count), else the best sentence, which must end as a statement
    (not ":") and hold no ">>>" code. It is shown only for a fact question (how-to, why, explain and what-changed questions have no
    one-sentence answer) whose confidence reaches ``HEADLINE_MIN_CONFIDENCE``; never when its
    sentence shares none of the question's key terms. One of two options a question names
    ("Who is older, A or B?") has confidence 1.0.
    """
    span = span_answer(question, [Sentence(c.text, c.score, c.subject) for c in ranked])
    source = next((c for c in ranked if span and span in c.text), ranked[0])
    said = " ".join(p.text for p in passages)
    if span and _common_word(span, source.text, said) and answer_type(question) != "options":
        span, source = "", ranked[0]  # capitalised only because it opens its sentence
    if span and answer_type(question) == "options":
        confidence = 1.0  # one of the two options the question names: never about something else
    elif not span and not _reads_as_answer(source.text):
        confidence = 0.0
    else:
        confidence = headline_confidence(question, source.text, passages[source.n - 1])
    kind = question_kind(question)
    return Headline(
        text=span or _shortened(source.text),
        n=source.n,
        kind=kind,
        confidence=round(confidence, 3),
        shown=kind == "fact" and confidence >= HEADLINE_MIN_CONFIDENCE,
    )


def _common_word(span: str, sentence: str, said: str) -> bool:
    """Whether ``span`` is one plain word opening ``sentence`` ("If", "Newer") that the passages
    (``said``) also write in lower case: capitalised only because it comes first, not a name."""
    return (
        " " not in span
        and sentence.startswith(span)
        and span[:1].isupper()
        and re.search(rf"\b{re.escape(span.lower())}\b", said) is not None
    )


def _reads_as_answer(sentence: str) -> bool:
    """Whether a sentence can stand as a headline: it ends as a statement does (not with ":",
    which introduces an example) and is not interpreter input (">>>")."""
    return sentence.rstrip().endswith((".", "!", "?", ")", '"')) and ">>>" not in sentence


def headline_confidence(question: str, sentence: str, passage: Passage) -> float:
    """How surely ``sentence`` (of ``passage``) answers ``question``, in [0, 1]: the mean of the
    shares of the question's key terms (``spans.key_terms``) that the sentence holds and that its
    passage (heading and text) holds. 0.0 when the sentence holds none of them, so such a
    sentence, or a span cut from it, is never a headline."""
    asked = set(key_terms(question))
    in_sentence = asked & set(terms(sentence))
    if not in_sentence:
        return 0.0
    in_passage = asked & set(terms(f"{_heading(passage)} {passage.text}"))
    return (len(in_sentence) + len(in_passage)) / (2 * len(asked))


def lead_passage(question: str, passages: list[Passage], ranked: list[Candidate]) -> dict:
    """What leads an answer without a headline: the best passage's document title, section and
    most relevant paragraph, ``{"n", "document", "title", "section", "uri", "text"}``.

    The best passage is the one whose heading (document title and section path) and text hold
    the most of the question's key terms, plus ``RANK_WEIGHT / n`` for its rank ``n`` and
    ``RANK_WEIGHT`` for holding the best sentence; ties keep rank order. Its paragraph is the
    prose paragraph (code blocks and headings are not candidates) with the most key terms, ties to the first,
    followed by the next block when it ends with ":" (the example it introduces).
    """
    asked = set(key_terms(question))
    best_n = ranked[0].n if ranked else 1

    def score(n: int) -> float:
        passage = passages[n - 1]
        heading = _heading(passage)
        held = set(terms(f"{heading} {passage.text}"))
        titled = set(terms(heading))
        share = len(asked & held) / len(asked) if asked else 0.0
        title_share = len(asked & titled) / len(asked) if asked else 0.0
        return share + title_share + RANK_WEIGHT / n + (RANK_WEIGHT if n == best_n else 0.0)

    n = max(range(1, len(passages) + 1), key=lambda i: (score(i), -i))
    passage = passages[n - 1]
    document = getattr(passage.anchor, "version", None) and passage.document
    return {
        "n": n,
        "document": document.external_id if document else "",
        "title": document.title if document else "",
        "section": _section(_heading(passage), document.title if document else ""),
        "uri": document.uri if document else "",
        "text": _paragraph(text_defang(passage.text), asked),
    }


def _heading(passage: Passage) -> str:
    """The passage's section path as its chunk records it ("" without a stored chunk)."""
    return getattr(passage.anchor, "heading", "") or ""


def _section(heading: str, title: str) -> str:
    """``heading`` without its leading document title ("Title › A › B" -> "A › B")."""
    if title and heading == title:
        return ""
    return heading.removeprefix(f"{title} › ") if title else heading


def _title_like(block: str) -> bool:
    """Whether ``block`` reads as a heading: under 8 words, not ending as a sentence does."""
    return len(block.split()) < 8 and not block.rstrip().endswith((".", "!", "?", ":", ")"))


def _paragraph(text: str, asked: set[str]) -> str:
    """The prose paragraph of ``text`` (not code, not a heading) holding the most of ``asked``,
    ties to the first, with the block after it when it ends with ":"; the text's start when it
    has no such paragraph."""
    blocks = [block.strip("\n") for block in _BLOCK_BREAK.split(text) if block.strip()]
    prose = [i for i, block in enumerate(blocks) if not block.startswith((" ", "\t")) and not _title_like(block)]
    if not prose:
        return " ".join(text.split())[:LEAD_CHARS]
    best = max(prose, key=lambda i: (len(asked & set(terms(blocks[i]))), -i))
    chosen = " ".join(blocks[best].split())
    if chosen.endswith(":") and best + 1 < len(blocks):
        chosen = f"{chosen}\n\n{blocks[best + 1]}"
    return chosen[:LEAD_CHARS]


def _shortened(sentence: str) -> str:
    """``sentence``, or its first ``SHORT_WORDS`` words and "…" when it is longer."""
    words = sentence.split()
    return sentence if len(words) <= SHORT_WORDS else " ".join(words[:SHORT_WORDS]).rstrip(",;:") + "…"
