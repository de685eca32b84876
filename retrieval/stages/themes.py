"""Themes: when a broad question has more relevant candidates than the context holds, pack the
breadth of the material, not five variants of its most popular part.

The "Quantity" section of the production-retrieval seed (``magic-of-rag-retrieval.txt``)
proposes a layered technique: extract themes, then filter by relevance within them. Here:

1. **Threshold.** Candidates whose fused score is at least ``threshold`` x the best score
   pass. When no more pass than the context holds (``k``), nothing changes.
2. **Themes.** The passing candidates' embeddings are grouped by average-linkage agglomerative
   clustering on cosine distance, cut at ``distance`` (scikit-learn's
   ``AgglomerativeClustering``), at most ``k`` themes.
3. **Labels.** Each theme is named by its most distinctive terms: class-based TF-IDF
   (c-TF-IDF, Grootendorst 2022, "BERTopic: Neural topic modeling with a class-based TF-IDF
   procedure"), term frequency within the theme x log(1 + average terms per theme / the term's
   frequency over all themes), English stop words removed (scikit-learn's ``CountVectorizer``).
4. **Order.** The best chunk of each theme first (themes by their best score), then the rest by
   score; the packing strategy (top-N or window) takes the first ``k`` of that order.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from core.replicas import read_connection
from core.schema import setting
from retrieval.stages.base import Stage
from retrieval.types import SearchResult


@dataclass(frozen=True)
class ThemesConfig:
    """Settings of the ``themes`` stage."""

    themes: str = setting(
        "off", choices=("off", "on"), doc="pack the best chunk of each theme of a broad question first"
    )
    themes_pool: int = setting(30, range=(5, 100), integer=True, doc="candidates grouped into themes")
    themes_threshold: float = setting(0.6, range=(0.0, 1.0), doc="share of the best score a candidate needs to count")
    themes_distance: float = setting(0.5, range=(0.05, 2.0), doc="cosine distance at which themes are cut")


@dataclass
class Theme:
    """One group of candidates: its label terms and members (indexes into the results, best first)."""

    label: list[str]
    members: list[int] = field(default_factory=list)


def chunk_embeddings(*, tenant_id: int, chunk_ids: list[int]) -> dict[int, np.ndarray]:
    """The stored embeddings of the tenant's chunks among ``chunk_ids``: ``{chunk id: float32 vector}``."""
    if not chunk_ids:
        return {}
    with read_connection().cursor() as cursor:
        cursor.execute(
            "SELECT id, embedding::real[] FROM knowledge_chunk WHERE tenant_id = %s AND id = ANY(%s)",
            [tenant_id, list(chunk_ids)],
        )
        return {row[0]: np.asarray(row[1], dtype=np.float32) for row in cursor.fetchall() if row[1] is not None}


def themes_group(texts: list[str], vectors: np.ndarray, *, max_themes: int, distance: float) -> list[Theme]:
    """Group ``texts`` (with their ``vectors``, shape ``(n, d)``) into at most ``max_themes`` themes.

    Themes come back in order of their best member (members keep the input order, so the input
    should be best first). ``distance`` is the cosine distance (0-2) at which clusters stop
    merging; when that leaves more than ``max_themes`` clusters, the cut is ``max_themes``
    clusters instead. ``ValueError`` when lengths differ or ``max_themes`` < 1.
    """
    from sklearn.cluster import AgglomerativeClustering

    n = len(texts)
    if n != len(vectors):
        raise ValueError("texts and vectors differ in length")
    if max_themes < 1:
        raise ValueError("max_themes must be at least 1")
    if n == 0:
        return []
    if n == 1:
        return [Theme(label=_labels(texts, [0])[0], members=[0])]
    clusterer = AgglomerativeClustering(
        n_clusters=None, metric="cosine", linkage="average", distance_threshold=distance
    )
    assignment = clusterer.fit_predict(vectors)
    if len(set(assignment)) > max_themes:
        clusterer = AgglomerativeClustering(n_clusters=max_themes, metric="cosine", linkage="average")
        assignment = clusterer.fit_predict(vectors)
    order: list[int] = []  # cluster ids by their first (best) member
    for label in assignment:
        if label not in order:
            order.append(int(label))
    themes = [Theme(label=[], members=[i for i in range(n) if assignment[i] == cluster]) for cluster in order]
    for theme, label in zip(themes, _labels(texts, [int(assignment[i]) for i in range(n)], order), strict=True):
        theme.label = label
    return themes


def _labels(texts: list[str], assignment: list[int], order: list[int] | None = None, *, terms: int = 3) -> list:
    """c-TF-IDF's top ``terms`` words per cluster, for clusters in ``order`` (default: [0])."""
    from sklearn.feature_extraction.text import CountVectorizer

    order = order if order is not None else [0]
    joined = [" ".join(texts[i] for i in range(len(texts)) if assignment[i] == cluster) for cluster in order]
    try:
        counts = CountVectorizer(stop_words="english", token_pattern=r"(?u)\b[a-zA-Z][a-zA-Z0-9_-]+\b").fit(joined)
    except ValueError:  # nothing but stop words
        return [[] for _ in order]
    matrix = counts.transform(joined).toarray().astype(np.float64)
    tf = matrix / np.maximum(matrix.sum(axis=1, keepdims=True), 1.0)
    average = matrix.sum() / max(len(order), 1)
    idf = np.log(1.0 + average / np.maximum(matrix.sum(axis=0), 1.0))
    scores = tf * idf
    vocabulary = counts.get_feature_names_out()
    return [[str(vocabulary[j]) for j in np.argsort(-row, kind="stable")[:terms] if row[j] > 0] for row in scores]


def results_by_theme(
    results: list[SearchResult], *, tenant_id: int, k: int, threshold: float, distance: float
) -> tuple[list[SearchResult], dict]:
    """``results`` (best first) reordered so the first ``k`` hold the best chunk of each theme.

    Returns the new order (same results, ``rank`` renumbered) and a summary for the trace:
    ``passed`` (candidates over the threshold), ``themes`` (label and chunk ids each) or
    ``skipped`` with the reason. ``threshold`` is relative to the best fused score (0-1).
    """
    if not results:
        return results, {"skipped": "no candidates"}
    best = results[0].score
    passing = (
        [i for i, r in enumerate(results) if r.score >= threshold * best] if best > 0 else list(range(len(results)))
    )
    if len(passing) <= k:
        return results, {"passed": len(passing), "skipped": f"no more candidates than the context holds ({k})"}
    vectors = chunk_embeddings(tenant_id=tenant_id, chunk_ids=[results[i].chunk.pk for i in passing])
    passing = [i for i in passing if results[i].chunk.pk in vectors]
    if len(passing) <= k:
        return results, {"passed": len(passing), "skipped": "too few embedded candidates"}
    themes = themes_group(
        [results[i].chunk.text for i in passing],
        np.stack([vectors[results[i].chunk.pk] for i in passing]),
        max_themes=k,
        distance=distance,
    )
    leaders = [passing[theme.members[0]] for theme in themes]
    chosen = set(leaders)
    order = [results[i] for i in leaders] + [r for i, r in enumerate(results) if i not in chosen]
    for rank, result in enumerate(order, 1):
        result.rank = rank
    summary = {
        "passed": len(passing),
        "themes": [
            {"label": theme.label, "chunks": [results[passing[m]].chunk.pk for m in theme.members]} for theme in themes
        ],
    }
    return order, summary


class Themes(Stage):
    """The ``themes`` step of an answer (``themes: on``): the best ``themes_pool`` results
    reordered so the first ``k`` hold the best chunk of each theme (``results_by_theme``), then
    cut to ``k``. It asks the ranking for ``themes_pool`` results."""

    name = "themes"
    config = ThemesConfig

    def active(self, state):
        return state.answering and self.settings(state).themes == "on"

    def wants(self, state):
        return self.settings(state).themes_pool if self.active(state) else 0

    def apply(self, state, step):
        config = self.settings(state)
        results, step.summary = results_by_theme(
            state.results[: config.themes_pool],
            tenant_id=state.tenant.pk,
            k=state.request.k,
            threshold=config.themes_threshold,
            distance=config.themes_distance,
        )
        state.results = results[: state.request.k]
        return state
