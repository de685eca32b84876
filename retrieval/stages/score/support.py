"""LLM-free answer measures: citation coverage and embedding support of an answer's sentences.

Two cheap checks that run on every answer, with or without an LLM (seed
``rag-quality-design.txt``, "Contextual Accuracy": the answer should be deduced from the
context; here measured without asking an LLM):

* **coverage**: the share of the answer's sentences that cite at least one passage (``[n]``).
* **support**: for each sentence that cites passages, the best cosine similarity between the
  sentence (its markers removed) and any sentence of the passages it cites, by the tenant's
  embedder (all-MiniLM-L6-v2 by default; Reimers & Gurevych 2019). ``support_min`` is the
  weakest cited sentence (the likeliest unsupported claim), ``support_mean`` the average. An
  extractive answer quotes its passages, so its support is about 1.0; a paraphrase scores
  lower, an invented claim lower still. Sentences that cite nothing are counted by coverage,
  not by support.

What counts as a sentence is shared with the citation safety net that runs when an answer is
made (``retrieval.stages.generate.citations``: ``answer_sentences``, ``passage_sentences``).
"""

from __future__ import annotations

import numpy as np

from knowledge.embedders import get_embedder
from retrieval.stages.generate.citations import answer_sentences, passage_sentences
from retrieval.types import Answer

__all__ = ["answer_sentences", "answer_support", "passage_sentences"]


def answer_support(answer: Answer, *, embedder) -> dict:
    """Citation coverage and embedding support of ``answer``; no LLM.

    ``embedder`` is an embedder key (``"local"``, ``"openai:<model>"``: ``get_embedder``) or an
    object with ``embed(texts) -> ndarray`` of unit-length rows. Citations are resolved through
    ``answer.citations`` (a number the answer does not list as a citation supports nothing).

    Returns ``{"coverage", "support_min", "support_mean", "sentences", "cited_sentences"}``:
    ``coverage`` in [0, 1] (cited sentences / sentences), ``support_*`` cosine similarities in
    [-1, 1] (in practice [0, 1]) over the cited sentences, all rounded to 4 places. ``coverage``
    is ``None`` when the answer has no sentence to score (empty, or "the documents do not
    contain an answer": ``answer.found`` false); ``support_*`` are ``None`` when no sentence
    cites a passage. An embedding endpoint that fails raises ``core.errors.UpstreamError``.
    """
    empty = {"coverage": None, "support_min": None, "support_mean": None, "sentences": 0, "cited_sentences": 0}
    if not answer.found:
        return empty
    sentences = answer_sentences(answer.text)
    if not sentences:
        return empty
    passages = {citation.n: citation.passage for citation in answer.citations}
    cited = [(sentence, [n for n in numbers if n in passages]) for sentence, numbers in sentences]
    cited = [(sentence, numbers) for sentence, numbers in cited if numbers]
    coverage = len(cited) / len(sentences)
    result = {**empty, "coverage": round(coverage, 4), "sentences": len(sentences), "cited_sentences": len(cited)}
    if not cited:
        return result
    # One batch: the cited answer sentences, then every sentence of every cited passage.
    texts = [sentence for sentence, _ in cited]
    spans: dict[int, tuple[int, int]] = {}
    for n in sorted({n for _, numbers in cited for n in numbers}):
        own = passage_sentences(passages[n])
        spans[n] = (len(texts), len(texts) + len(own))
        texts.extend(own)
    model = get_embedder(embedder) if isinstance(embedder, str) else embedder
    vectors = np.asarray(model.embed(texts), dtype=np.float32)
    best: list[float] = []
    for i, (_, numbers) in enumerate(cited):
        rows = [vectors[a:b] for a, b in (spans[n] for n in numbers) if b > a]
        if not rows:
            best.append(0.0)
            continue
        best.append(float(np.max(np.concatenate(rows) @ vectors[i])))
    result["support_min"] = round(min(best), 4)
    result["support_mean"] = round(float(np.mean(best)), 4)
    return result
