"""Extractive answers: the passage sentences closest to the question, each cited; no LLM.

Sentences are scored by cosine similarity of embeddings to the question, plus query-term
overlap and a prior for the passage's rank. Texts are defanged first
(``retrieval.stages.pack.text_defang``): a document's own ``[n]`` never becomes a citation, and
nothing a passage says is acted on; it is only quoted.
"""

from __future__ import annotations

import re

import numpy as np

from knowledge.embedders import get_embedder
from knowledge.ingestion.splitters import sentence_offsets
from retrieval.stages.pack import text_defang
from retrieval.types import Answer, Citation, Passage

LABEL = "Extractive answer (no LLM configured); the most relevant passages say:"
DEGRADED_LABEL = "Extractive answer (the LLM could not answer); the most relevant passages say:"
SHORT_WORDS = 30  # the extractive short answer's most words
_WORD = re.compile(r"[a-z0-9_]+")
_STOP = frozenset(
    "a an and are as at be by can do does for from how i in is it my of on or the this to what when where which "
    "who why with you your".split()
)


def _terms(text: str) -> set[str]:
    return {w for w in _WORD.findall(text.lower()) if w not in _STOP and len(w) > 1}


def answer_extract(
    question: str, passages: list[Passage], *, embedder: str, sentences: int = 3, label: str = LABEL
) -> Answer:
    """Up to ``sentences`` sentences of ``passages`` most relevant to ``question``, each cited ``[n]``.

    Sentences of 7-80 words that do not look like headings are candidates; when none qualify,
    each passage's first 400 characters are. ``passages`` must not be empty. The short answer
    is the best-scoring sentence (its first ``SHORT_WORDS`` words and "…" when longer); each
    quoted sentence is one entry of ``sentences``, cited and supported (coverage 1.0).
    """
    candidates: list[tuple[int, str]] = []
    for n, passage in enumerate(passages, start=1):
        text = text_defang(passage.text)
        for a, b in sentence_offsets(text):
            sentence = " ".join(text[a:b].split())
            words = len(sentence.split())
            looks_like_heading = words < 8 and not sentence.endswith((".", "!", "?", ":", ")"))
            if 7 <= words <= 80 and not looks_like_heading:
                candidates.append((n, sentence))
    if not candidates:
        candidates = [(n, " ".join(text_defang(p.text).split())[:400]) for n, p in enumerate(passages, start=1)]
    vectors = get_embedder(embedder).embed([question] + [s for _, s in candidates])
    similarity = vectors[1:] @ vectors[0]
    query_terms = _terms(question)
    overlap = np.array([len(query_terms & _terms(s)) / max(1, len(query_terms)) for _, s in candidates])
    rank_prior = np.array([1.0 / (n + 1) for n, _ in candidates])
    score = similarity + 0.3 * overlap + 0.2 * rank_prior
    chosen = sorted(np.argsort(-score)[:sentences], key=lambda i: (candidates[i][0], i))
    used: list[int] = []
    lines = []
    quoted = []
    for i in chosen:
        n, sentence = candidates[i]
        lines.append(f"{sentence} [{n}]")
        quoted.append({"text": sentence, "citations": [n], "supported": True, "added": False})
        if n not in used:
            used.append(n)
    text = label + "\n" + "\n".join(f"- {line}" for line in lines)
    return Answer(
        question=question,
        text=text,
        mode="extractive",
        citations=[Citation(n=n, passage=passages[n - 1]) for n in sorted(used)],
        short_answer=_shortened(candidates[int(np.argmax(score))][1]),
        sentences=quoted,
        citation_coverage=1.0,
    )


def _shortened(sentence: str) -> str:
    """``sentence``, or its first ``SHORT_WORDS`` words and "…" when it is longer."""
    words = sentence.split()
    return sentence if len(words) <= SHORT_WORDS else " ".join(words[:SHORT_WORDS]).rstrip(",;:") + "…"
