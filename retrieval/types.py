"""The data that flows through a retrieval/answer pipeline, stage to stage.

A run is: question -> rewrite (``QueryPlan``) -> retrieve (``CandidateLists``) -> fuse and
rerank (``list[SearchResult]``) -> pack (``list[Passage]``) -> generate (``Answer``). Every stage
also reports a ``Step`` (name, milliseconds, a compact JSON summary) for the run's trace, and
LLM stages add their calls to the run's ``Usage`` (``llm.Usage``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from knowledge.pages import chunk_pages
from llm import Usage

Ranking = list[tuple[int, float]]  # (chunk id, score), best first


@dataclass
class Step:
    """One stage's record in a trace: ``stage`` name, wall time in ms, a JSON-able ``summary``.

    ``error`` holds the reason when the stage failed or degraded (then the pipeline went on
    with a fallback); ``usage`` is the LLM usage of this stage alone.
    """

    stage: str
    ms: float
    summary: dict[str, Any] = field(default_factory=dict)
    error: str = ""
    usage: Usage = field(default_factory=Usage)

    def as_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {"stage": self.stage, "ms": round(self.ms, 2)}
        if self.error:
            data["error"] = self.error
        return data


@dataclass
class QueryPlan:
    """What the retrievers search for, as the rewrite stages leave it.

    ``question`` is the user's text, untouched. ``lexical_query`` is the text BM25 analyses
    (English stemming) and ``lexical_terms`` optional weighted lexemes that replace it (RM3, LLM
    OR-expansion: ``{lexeme: weight}``). ``dense_text`` is the text the dense retriever embeds,
    unless a stage set ``dense_vector`` (HyDE). ``notes`` are human-readable remarks for the trace.
    """

    question: str
    lexical_query: str
    dense_text: str
    lexical_terms: dict[str, float] | None = None
    dense_vector: list[float] | None = None
    notes: list[str] = field(default_factory=list)

    @classmethod
    def from_question(cls, question: str) -> QueryPlan:
        return cls(question=question, lexical_query=question, dense_text=question)


@dataclass
class CandidateLists:
    """Each retriever's candidates, ``{"lexical": Ranking, "dense": Ranking}`` (either may be absent).

    ``details``: per list, per chunk id, the parts of its score that results show beside rank
    and score in ``components`` (the lexical list's ``{"body", "enrichment"}`` field scores).
    """

    lists: dict[str, Ranking] = field(default_factory=dict)
    details: dict[str, dict[int, dict[str, float]]] = field(default_factory=dict)


@dataclass
class SearchResult:
    """One ranked chunk with its fused score and each retriever's score and rank (1-based).

    ``chunk`` is a ``knowledge.Chunk`` with its version, document and source loaded; its ``kind``
    ("body" or "summary": the document's summary, ``docs/summaries.md``) is in ``as_dict``, with
    ``page`` and ``page_end``, the pages it starts and ends on in a paged document (1-based;
    ``None`` for other documents: ``knowledge.pages``).
    """

    chunk: Any
    score: float
    rank: int
    components: dict[str, dict[str, float | int]] = field(default_factory=dict)
    # Duplicates (retrieval.stages.rerank.near_duplicates): other places of the exact content,
    # the near-duplicate cluster's other members, and what changed from the copy this one supersedes.
    also_in: list[dict] = field(default_factory=list)
    near_duplicates: list[dict] = field(default_factory=list)
    update: str | None = None

    @property
    def duplicates(self) -> dict:
        """``also_in``, ``near_duplicates`` and ``update`` when set (what a citation of it shows)."""
        return {
            key: value
            for key, value in (
                ("also_in", self.also_in),
                ("near_duplicates", self.near_duplicates),
                ("update", self.update),
            )
            if value
        }

    def as_dict(self, *, with_text: bool = True) -> dict:
        version = self.chunk.version
        document = version.document
        data = {
            "rank": self.rank,
            "document": document.external_id,
            "document_id": document.pk,
            "title": document.title,
            "uri": document.uri,
            "source": document.source.name,
            "version": version.number,
            **_version_fields(version),
            "chunk": self.chunk.ordinal,
            "chunk_id": self.chunk.pk,
            **chunk_pages(self.chunk),  # page, page_end: 1-based, None without pages
            "kind": self.chunk.kind,
            "heading": self.chunk.heading,
            "score": round(self.score, 6),
            "components": self.components,
            "also_in": self.also_in,
            "near_duplicates": self.near_duplicates,
            "update": self.update,
        }
        if with_text:
            data["text"] = self.chunk.text
        return data


def _version_fields(version) -> dict:
    """A result's or citation's version date (ISO; ``published_at``, else ingestion) and currency."""
    moment = version.published_at or version.ingested_at
    return {"version_date": moment.date().isoformat() if moment else None, "version_current": version.is_current}


@dataclass
class Passage:
    """Context text from one document version: ``chunks`` are the chunk ordinals it covers.

    ``anchor`` is the retrieved chunk (the one a citation points at); ``score`` its fused score;
    ``duplicates`` where else its content appears (``SearchResult.duplicates``), shown on citations.
    """

    anchor: Any
    text: str
    score: float
    chunks: list[int] = field(default_factory=list)
    duplicates: dict = field(default_factory=dict)

    @property
    def version(self):
        return self.anchor.version

    @property
    def document(self):
        return self.anchor.version.document


@dataclass
class Citation:
    """A numbered reference ``[n]`` to the passage (chunk and version) a claim comes from.

    ``kind`` in ``as_dict`` says whether the passage is the document's summary ("summary") or its text ("body");
    ``page`` and ``page_end`` are the cited chunk's pages in a paged document (``None`` otherwise).
    """

    n: int
    passage: Passage

    def as_dict(self) -> dict:
        chunk = self.passage.anchor
        document = self.passage.document
        return {
            "n": self.n,
            "document": document.external_id,
            "document_id": document.pk,
            "title": document.title,
            "uri": document.uri,
            "version": self.passage.version.number,
            **_version_fields(self.passage.version),
            "chunk": chunk.ordinal,
            "chunk_id": chunk.pk,
            **chunk_pages(chunk),  # the cited chunk's page and page_end (None without pages)
            "kind": chunk.kind,
            "score": round(self.passage.score, 6),
            "text": self.passage.text,
            **self.passage.duplicates,  # also_in, near_duplicates, update when any
        }


@dataclass
class Answer:
    """An answer: a short answer first, then the explanation with its cited sentences.

    ``text`` is the explanation with ``[n]`` markers (the citations' numbers); ``citations``
    lists only the passages the model or the citation safety net cited in it
    (``retrieval.stages.generate.citations``). ``short_answer`` is the direct answer (a name,
    number, date, yes/no or one short sentence; ``""`` when the passages do not hold the answer
    or it could not be told apart). ``sentences`` are the explanation's claim sentences,
    ``{"text" (markers removed), "citations": [n...], "supported": bool, "added": bool}``
    (``added``: the citation was filled in by the safety net). ``citation_coverage`` is the
    share of those sentences with at least one citation, in [0, 1] (0.0 without sentences);
    ``unsupported`` the sentences no passage supports. ``mode`` is "llm" or "extractive";
    ``found`` is false when the documents hold no answer. ``timings_ms`` in milliseconds.
    ``lead`` (extractive answers without a short answer, else ``None``) is the passage to show
    first: ``{"n", "document" (external id), "title", "section", "uri", "text" (its most relevant
    paragraph)}``; ``n`` is among the citations.
    """

    question: str
    text: str
    mode: str
    citations: list[Citation]
    timings_ms: dict[str, float] = field(default_factory=dict)
    found: bool = True
    short_answer: str = ""
    sentences: list[dict] = field(default_factory=list)
    citation_coverage: float = 0.0
    unsupported: list[str] = field(default_factory=list)
    lead: dict | None = None

    def as_dict(self) -> dict:
        return {
            "question": self.question,
            "short_answer": self.short_answer,
            "lead": self.lead,
            "answer": self.text,
            "mode": self.mode,
            "found": self.found,
            "citations": [c.as_dict() for c in self.citations],
            "sentences": self.sentences,
            "citation_coverage": self.citation_coverage,
            "unsupported": self.unsupported,
            "timings_ms": self.timings_ms,
        }
