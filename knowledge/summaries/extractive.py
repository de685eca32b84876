"""The LLM-free summary: lead sentences of the most central chunks, by LexRank over chunk embeddings.

LexRank (Erkan & Radev 2004, "LexRank: Graph-based Lexical Centrality as Salience in Text
Summarization") ranks the units of a text by their stationary probability in a random walk over
the graph of their similarities; continuous LexRank weighs each edge by the similarity itself.
Here the units are a version's chunks and the similarity is the cosine of their stored
embeddings (all-MiniLM-L6-v2 for the local embedder), so no extra model call is made, as in
embedding-centroid summarization (Rossiello, Basile & Semeraro 2017). The summary then takes:

1. the document's first sentence (the lead: the strongest single-sentence baseline for
   expository text, and where a title's subject is usually introduced);
2. the first sentence of each chunk in order of decreasing centrality, skipping sentences
   already taken, while the budget (``max_tokens``, cl100k tokens) allows;

and lays them out in document order. ``sumy`` (LexRank over TF-IDF sentences) was the library
choice, but its tokenizer loads NLTK's punkt data at run time, which an offline machine lacks.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from knowledge.ingestion.splitters import sentence_offsets
from llm.tokenizer import count_tokens, get_encoding

DAMPING = 0.85


@dataclass(frozen=True)
class BodyChunk:
    """A body chunk as the summarizer reads it: its ordinal, text and unit-length embedding."""

    ordinal: int
    text: str
    vector: np.ndarray


def lexrank(vectors: np.ndarray, *, damping: float = DAMPING, iterations: int = 100, tol: float = 1e-8) -> np.ndarray:
    """Continuous LexRank centrality of each row of ``vectors`` (shape ``(n, d)``, unit length).

    Edges are the positive cosine similarities between different rows; returns the stationary
    distribution of the damped random walk (shape ``(n,)``, sums to 1), by power iteration.
    """
    n = len(vectors)
    if n == 0:
        return np.zeros(0)
    similarity = np.clip(vectors @ vectors.T, 0.0, None).astype(np.float64)
    np.fill_diagonal(similarity, 0.0)
    sums = similarity.sum(axis=1, keepdims=True)
    transition = np.where(sums > 0, similarity / np.where(sums > 0, sums, 1.0), 1.0 / n)
    scores = np.full(n, 1.0 / n)
    for _ in range(iterations):
        updated = (1 - damping) / n + damping * (transition.T @ scores)
        if np.abs(updated - scores).sum() < tol:
            scores = updated
            break
        scores = updated
    return scores / scores.sum()


def _first_sentence(text: str) -> str:
    offsets = sentence_offsets(text)
    if not offsets:
        return " ".join(text.split())
    a, b = offsets[0]
    return " ".join(text[a:b].split())


def _clip(text: str, max_tokens: int) -> str:
    """``text`` cut to ``max_tokens`` cl100k tokens (with an ellipsis when cut)."""
    encoding = get_encoding("cl100k_base")
    tokens = encoding.encode_ordinary(text)
    if len(tokens) <= max_tokens:
        return text
    return encoding.decode(tokens[: max(1, max_tokens - 1)]).rstrip() + "…"


def summary_extract(chunks: list[BodyChunk], *, max_tokens: int) -> str:
    """An extractive summary of a version from its body ``chunks`` (any order), at most ``max_tokens``.

    See the module docstring. Returns ``""`` for no chunks. The first sentence alone is clipped
    to the budget when it is longer.
    """
    if not chunks:
        return ""
    ordered = sorted(chunks, key=lambda c: c.ordinal)
    centrality = lexrank(np.stack([c.vector for c in ordered]))
    picked: dict[int, str] = {0: _clip(_first_sentence(ordered[0].text), max_tokens)}
    used = count_tokens(picked[0])
    seen = {picked[0]}
    for index in np.argsort(-centrality, kind="stable"):
        index = int(index)
        if index in picked:
            continue
        sentence = _first_sentence(ordered[index].text)
        if not sentence or sentence in seen:
            continue
        cost = count_tokens(sentence) + 1
        if used + cost > max_tokens:
            continue  # a shorter sentence of a less central chunk may still fit
        picked[index] = sentence
        seen.add(sentence)
        used += cost
    return " ".join(picked[i] for i in sorted(picked))
