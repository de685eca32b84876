"""Signal reranker ``diversity``: per-document/per-source caps, or MMR.

Seed ``magic-of-rag-retrieval.txt``, "Data Variety": group results by source and take the top
snippets of each, so one document or source does not fill the context. Two methods, chosen per
tenant by ``diversity``:

``caps``
    Walk the ranking best first and keep a result while its document has fewer than
    ``diversity_per_document`` and its source fewer than ``diversity_per_source`` kept results
    (0 = no cap). Results over a cap are *deferred*, not dropped: they follow the kept ones in
    their original order, so the stage reorders and never shortens the list.
``mmr``
    Maximal Marginal Relevance (Carbonell and Goldstein, "The use of MMR, diversity-based
    reranking for reordering documents and producing summaries", SIGIR 1998): pick greedily
    ``argmax lambda * rel(d) - (1 - lambda) * max_{s in S} cos(d, s)`` where ``rel`` is the
    fused score min-max normalized over the candidates and ``cos`` the cosine similarity of the
    chunk embeddings (pgvector computes the candidates' pairwise similarities in one query),
    ``lambda = mmr_lambda``.

Each result's ``components["diversity"]`` says what the stage saw (the document's and source's
running counts, or the MMR terms).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from core.replicas import read_connection
from core.schema import setting

NAME = "diversity"


@dataclass(frozen=True)
class Config:
    """Settings of the ``diversity`` reranker."""

    diversity: str = setting("off", choices=("off", "caps", "mmr"), doc="per-document/source caps, or MMR")
    diversity_per_document: int = setting(
        2, range=(0, 50), integer=True, doc="caps: results one document may place in the top k (0 = no cap)"
    )
    diversity_per_source: int = setting(
        0, range=(0, 50), integer=True, doc="caps: results one source may place in the top k (0 = no cap)"
    )
    mmr_lambda: float = setting(0.7, range=(0.0, 1.0), doc="mmr: weight of relevance against novelty")


def active(run) -> bool:
    """Whether this reranker runs for ``run``: the spec's ``diversity`` is ``caps`` or ``mmr``."""
    return run.spec.of(Config).diversity in ("caps", "mmr")


def results_cap(results, *, per_document: int, per_source: int):
    """``results`` (best first) with those over a cap deferred behind the others (order kept).

    ``per_document``/``per_source``: the most results one document / one source may place before
    any deferred one (0 = no cap). Returns (reordered results, number deferred).
    """
    kept, deferred = [], []
    documents: dict[int, int] = {}
    sources: dict[int, int] = {}
    for result in results:
        document = result.chunk.version.document
        doc_seen = documents.get(document.pk, 0)
        source_seen = sources.get(document.source_id, 0)
        over = (per_document and doc_seen >= per_document) or (per_source and source_seen >= per_source)
        result.components["diversity"] = {
            "method": "caps",
            "document_seen": doc_seen,
            "source_seen": source_seen,
            "deferred": int(bool(over)),
        }
        if over:
            deferred.append(result)
            continue
        documents[document.pk] = doc_seen + 1
        sources[document.source_id] = source_seen + 1
        kept.append(result)
    return kept + deferred, len(deferred)


# Cosine similarity of every pair of the candidates' embeddings, computed by pgvector (``<=>`` is
# the cosine distance): a row per chunk, its similarities ordered by the other chunk's id.
# Cheaper than sending the vectors as text and parsing them (measured: a third of the time).
# A chunk still waiting for its embedding (KB_EMBED_QUEUE) counts as unlike every other (0).
_SIMILARITIES = """SELECT a.id, array_agg(coalesce(1 - (a.embedding <=> b.embedding), 0) ORDER BY b.id)
FROM knowledge_chunk a
JOIN knowledge_chunk b ON b.tenant_id = a.tenant_id AND b.id = ANY(%(ids)s::bigint[])
WHERE a.tenant_id = %(tenant)s AND a.id = ANY(%(ids)s::bigint[])
GROUP BY a.id"""


def _similarities(results, *, tenant) -> np.ndarray:
    """The cosine similarity matrix of the results' chunk embeddings, in ``results`` order.

    One query, scoped to ``tenant`` (both sides of every pair are the tenant's chunks).
    """
    ids = [r.chunk.pk for r in results]
    with read_connection().cursor() as cursor:
        cursor.execute(_SIMILARITIES, {"tenant": tenant.pk, "ids": ids})
        rows = dict(cursor.fetchall())
    ordered = sorted(rows)
    position = {pk: i for i, pk in enumerate(ordered)}
    matrix = np.array([rows[pk] for pk in ordered], dtype=np.float64)
    order = [position[pk] for pk in ids]
    return matrix[np.ix_(order, order)]


def results_mmr(results, *, similarity: np.ndarray, lam: float, k: int):
    """The first ``k`` of ``results`` chosen by MMR (Carbonell and Goldstein 1998), then the rest.

    ``similarity``: the results' pairwise cosine similarities (n x n, ``results`` order). Relevance is the fused score min-max
    normalized to [0, 1]. Returns the reordered results (all of them: the unpicked follow in their
    original order).
    """
    scores = np.array([r.score for r in results], dtype=np.float64)
    spread = scores.max() - scores.min()
    relevance = (scores - scores.min()) / spread if spread > 0 else np.ones_like(scores)
    n = len(results)
    picked: list[int] = []
    max_sim = np.full(n, 0.0)
    left = np.ones(n, dtype=bool)
    for _ in range(min(k, n)):
        mmr = lam * relevance - (1.0 - lam) * max_sim if picked else relevance.copy()
        mmr[~left] = -np.inf
        best = int(np.argmax(mmr))
        results[best].components["diversity"] = {
            "method": "mmr",
            "lambda": lam,
            "relevance": round(float(relevance[best]), 4),
            "max_similarity": round(float(max_sim[best]), 4),
            "mmr": round(float(mmr[best]), 4),
        }
        picked.append(best)
        left[best] = False
        max_sim = np.maximum(max_sim, similarity[best])
    rest = [i for i in range(n) if left[i]]
    return [results[i] for i in picked + rest]


def rerank(run, results, *, k: int):
    """``results`` diversified by the spec's method (``caps`` or ``mmr``); all kept, reordered.

    Returns (results best first, summary: method, settings, distinct documents and sources in the
    top ``k`` before and after).
    """
    spec = run.spec.of(Config)

    def distinct(rows) -> dict:
        top = rows[:k]
        return {
            "documents": len({r.chunk.version.document_id for r in top}),
            "sources": len({r.chunk.version.document.source_id for r in top}),
        }

    if len(results) < 2:
        return results, {"method": spec.diversity, "results": len(results)}
    before = distinct(results)
    if spec.diversity == "mmr":
        similarity = _similarities(results, tenant=run.tenant)
        results = results_mmr(results, similarity=similarity, lam=spec.mmr_lambda, k=k)
        settings = {"lambda": spec.mmr_lambda}
    else:
        results, deferred = results_cap(
            results, per_document=spec.diversity_per_document, per_source=spec.diversity_per_source
        )
        settings = {
            "per_document": spec.diversity_per_document,
            "per_source": spec.diversity_per_source,
            "deferred": deferred,
        }
    return results, {"method": spec.diversity, **settings, "before": before, "after": distinct(results)}
