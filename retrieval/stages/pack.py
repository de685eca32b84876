"""Pack stage: turn ranked chunks into the context passages an answer is written from.

Strategies from the RAG quality design (seed ``rag-quality-design.txt``):

* top-N: each of the top N chunks is a passage;
* window: each top chunk grows to its ``window`` neighbours on either side within the same
  document version; windows of one version that touch or overlap merge into one passage
  (kept at the rank of its best chunk).

``context_compose`` lays the passages out for a prompt, optionally in reverse order (reverse
packing, seed ``advanced-rag-querying.txt``: the best passage last, nearest the question), each
inside delimiters that mark it as untrusted data (or, ``compact``, as ``[n] title: text`` lines).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from django.db.models import Q

from core.models import Tenant
from core.schema import setting
from knowledge.models import Chunk, DocumentVersion
from retrieval.stages.base import Stage
from retrieval.types import Passage, SearchResult

STRATEGIES = ("top_n", "window")


@dataclass(frozen=True)
class PackConfig:
    """Settings of the ``pack`` stage (a request's ``strategy`` and ``window_size`` override them)."""

    strategy: str = setting("window", choices=STRATEGIES, doc="context passages: the top chunks, or each widened")
    window_size: int = setting(1, range=(0, 10), integer=True, doc="window: neighbouring chunks on either side")


# A citation-like marker ("[3]") inside a document's own text: neutralized so it can never pass
# for one of the product's citations (prompt injection, forged references).
_MARKER = re.compile(r"\[(\d{1,3})\]")
_DELIMITER = re.compile(r"</?passage\b[^>]*>", re.IGNORECASE)


def top_n(results: list[SearchResult], *, n: int) -> list[Passage]:
    """The first ``n`` results, one passage each."""
    return [
        Passage(anchor=r.chunk, text=r.chunk.text, score=r.score, chunks=[r.chunk.ordinal], duplicates=r.duplicates)
        for r in results[:n]
    ]


def window(tenant: Tenant, results: list[SearchResult], *, n: int, size: int = 1) -> list[Passage]:
    """The first ``n`` results, each widened by ``size`` neighbouring chunks on both sides.

    One query fetches every neighbour; text is cut from the version's text by character
    offsets, so chunk overlaps are not repeated. A summary chunk (``Chunk.kind``) is a passage of
    its own text: it has no neighbours and never merges with its document's body chunks.
    ``ValueError`` if ``size`` < 0.
    """
    if size < 0:
        raise ValueError("window size must be >= 0")
    chosen = results[:n]
    wanted: dict[int, set[int]] = {}
    for r in chosen:
        if r.chunk.kind == Chunk.Kind.SUMMARY:
            continue  # a summary has no neighbours: it is its own passage
        ordinal = r.chunk.ordinal
        wanted.setdefault(r.chunk.version_id, set()).update(range(max(0, ordinal - size), ordinal + size + 1))
    if not chosen:
        return []
    condition = Q()
    for version_id, ordinals in wanted.items():
        condition |= Q(version_id=version_id, ordinal__in=ordinals)
    neighbours: dict[tuple[int, int], Chunk] = (
        {
            (chunk.version_id, chunk.ordinal): chunk
            for chunk in Chunk.objects.for_tenant(tenant)
            .filter(condition, kind=Chunk.Kind.BODY)
            .only("id", "version_id", "ordinal", "char_start", "char_end", "text")
        }
        if wanted
        else {}
    )
    texts = dict(DocumentVersion.objects.for_tenant(tenant).filter(pk__in=wanted).values_list("pk", "text"))

    passages: list[Passage] = []
    spans: dict[int, list[tuple[int, int, Passage]]] = {}
    for r in chosen:
        if r.chunk.kind == Chunk.Kind.SUMMARY:
            passages.append(
                Passage(
                    anchor=r.chunk, text=r.chunk.text, score=r.score, chunks=[r.chunk.ordinal], duplicates=r.duplicates
                )
            )
            continue
        version = r.chunk.version
        ordinals = [
            o for o in range(r.chunk.ordinal - size, r.chunk.ordinal + size + 1) if (version.pk, o) in neighbours
        ]
        lo, hi = min(ordinals), max(ordinals)
        merged = next((p for a, b, p in spans.get(version.pk, []) if lo <= b + 1 and hi >= a - 1), None)
        if merged is not None:
            lo, hi = min(lo, min(merged.chunks)), max(hi, max(merged.chunks))
            merged.chunks = list(range(lo, hi + 1))
            merged.text = _cut(texts[version.pk], version.pk, neighbours, lo, hi)
            spans[version.pk] = [(a, b, p) for a, b, p in spans[version.pk] if p is not merged] + [(lo, hi, merged)]
            continue
        passage = Passage(
            anchor=r.chunk,
            text=_cut(texts[version.pk], version.pk, neighbours, lo, hi),
            score=r.score,
            chunks=list(range(lo, hi + 1)),
            duplicates=r.duplicates,
        )
        spans.setdefault(version.pk, []).append((lo, hi, passage))
        passages.append(passage)
    return passages


def _cut(text: str, version_id: int, neighbours: dict[tuple[int, int], Chunk], lo: int, hi: int) -> str:
    """The version's text from chunk ``lo``'s start to chunk ``hi``'s end.

    A chunk whose text is longer than its character range (a later part of a long table, which
    repeats the table's caption and header row before its rows: ``knowledge.ingestion.splitters``)
    keeps that leading text, so the passage still says what the columns mean.
    """
    first = neighbours[(version_id, lo)]
    body = text[first.char_start : neighbours[(version_id, hi)].char_end]
    extra = len(first.text) - (first.char_end - first.char_start)
    if extra > 0 and first.text.endswith(text[first.char_start : first.char_end]):
        body = first.text[:extra] + body
    return body


def text_defang(text: str) -> str:
    """``text`` with citation-like ``[n]`` markers turned into ``(n)`` and passage delimiters removed.

    Applied to every retrieved text before it reaches a prompt or an extractive answer, so a
    document cannot forge the product's citations or close its own passage early.
    """
    return _DELIMITER.sub("", _MARKER.sub(r"(\1)", text))


def context_compose(
    passages: list[Passage], *, reverse_pack: bool, compact: bool = False, texts: dict[int, str] | None = None
) -> str:
    """The context block of a prompt: one ``<passage n="…" title="…">…</passage>`` per passage, or
    with ``compact`` one ``[n] title: text`` paragraph (about 12 fewer prompt tokens per passage).

    Passages are numbered by rank (``[1]`` is the best); with ``reverse_pack`` they are laid out
    best-last. Titles and texts are defanged (``text_defang``): the block carries data only, and
    no text can forge a passage's ``[n]`` label or close its delimiter. ``texts`` (passage number
    -> text), when given, shows only those passages, with those texts in place of theirs (a
    compressed context), keeping their numbers.
    """
    blocks = []
    for n, passage in enumerate(passages, start=1):
        if texts is not None and n not in texts:
            continue
        title = text_defang(passage.anchor.heading or passage.document.title)
        body = text_defang(passage.text if texts is None else texts[n])
        if compact:
            title, body = " ".join(title.split()), " ".join(body.split())
            blocks.append(f"[{n}] {title}: {body}" if title else f"[{n}] {body}")
        else:
            title = title.replace('"', "'")
            blocks.append(f'<passage n="{n}" title="{title}">\n{body.strip()}\n</passage>')
    if reverse_pack:
        blocks.reverse()
    return "\n\n".join(blocks)


class Pack(Stage):
    """The ``pack`` step of an answer: the first ``k`` results as passages, by the spec's strategy
    (``top_n`` or ``window``). Retrieval ends here: ``search_ms`` is taken as it starts."""

    name = "pack"
    config = PackConfig

    def active(self, state):
        return state.answering

    def run(self, state):
        state.search_ms = state.elapsed_ms()
        return super().run(state)

    def apply(self, state, step):
        config = self.settings(state)
        if config.strategy == "window":
            state.passages = window(state.tenant, state.results, n=state.request.k, size=config.window_size)
        else:
            state.passages = top_n(state.results, n=state.request.k)
        step.summary = {
            "strategy": config.strategy,
            "window": config.window_size if config.strategy == "window" else None,
            "reverse_pack": state.request.reverse_pack,
            "passages": [{"chunk_id": p.anchor.pk, "chunks": p.chunks} for p in state.passages],
        }
        return state
