"""Retrieval strategies: turn ranked chunks into context passages.

From the RAG quality design (seed ``rag-quality-design.txt``):

* top-N: each of the top N chunks is a passage;
* window: each top chunk grows to its ``window`` neighbours on either side within the same
  document version; windows of one version that touch or overlap merge into one passage
  (kept at the rank of its best chunk).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from django.db.models import Q

from knowledge.models import Chunk, DocumentVersion, Tenant
from retrieval.search import SearchResult


@dataclass
class Passage:
    """Context text from one document version: ``chunks`` are the chunk ordinals it covers.

    ``anchor`` is the retrieved chunk (the one a citation points at); ``score`` its fused score.
    """

    anchor: Chunk
    text: str
    score: float
    chunks: list[int] = field(default_factory=list)

    @property
    def version(self):
        return self.anchor.version

    @property
    def document(self):
        return self.anchor.version.document


def top_n(results: list[SearchResult], *, n: int) -> list[Passage]:
    """The first ``n`` results, one passage each."""
    return [Passage(anchor=r.chunk, text=r.chunk.text, score=r.score, chunks=[r.chunk.ordinal]) for r in results[:n]]


def window(tenant: Tenant, results: list[SearchResult], *, n: int, size: int = 1) -> list[Passage]:
    """The first ``n`` results, each widened by ``size`` neighbouring chunks on both sides.

    One query fetches every neighbour; text is cut from the version's text by character
    offsets, so chunk overlaps are not repeated. ``ValueError`` if ``size`` < 0.
    """
    if size < 0:
        raise ValueError("window size must be >= 0")
    chosen = results[:n]
    wanted: dict[int, set[int]] = {}
    for r in chosen:
        ordinal = r.chunk.ordinal
        wanted.setdefault(r.chunk.version_id, set()).update(range(max(0, ordinal - size), ordinal + size + 1))
    if not chosen:
        return []
    condition = Q()
    for version_id, ordinals in wanted.items():
        condition |= Q(version_id=version_id, ordinal__in=ordinals)
    neighbours: dict[tuple[int, int], Chunk] = {
        (chunk.version_id, chunk.ordinal): chunk
        for chunk in Chunk.objects.for_tenant(tenant)
        .filter(condition)
        .only("id", "version_id", "ordinal", "char_start", "char_end")
    }
    texts = dict(DocumentVersion.objects.for_tenant(tenant).filter(pk__in=wanted).values_list("pk", "text"))

    passages: list[Passage] = []
    spans: dict[int, list[tuple[int, int, Passage]]] = {}
    for r in chosen:
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
        )
        spans.setdefault(version.pk, []).append((lo, hi, passage))
        passages.append(passage)
    return passages


def _cut(text: str, version_id: int, neighbours: dict[tuple[int, int], Chunk], lo: int, hi: int) -> str:
    """The version's text from chunk ``lo``'s start to chunk ``hi``'s end."""
    return text[neighbours[(version_id, lo)].char_start : neighbours[(version_id, hi)].char_end]
