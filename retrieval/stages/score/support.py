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

What counts as a sentence: the answer's text is split into lines; bullet and heading marks are
dropped; the extractive answer's label line and introductory lines ending in ":" without a
citation are skipped; each line is split into sentences (``sentence_offsets``, blingfire); a
"sentence" of citation markers only, or markers that open a sentence, belong to the sentence
before (``... ten minutes. [1] Drain ...``). Sentences without a letter or digit are skipped.
"""

from __future__ import annotations

import re

import numpy as np

from knowledge.embedders import get_embedder
from knowledge.ingestion.splitters import sentence_offsets
from retrieval.stages.generate.extractive import DEGRADED_LABEL, LABEL
from retrieval.stages.pack import text_defang
from retrieval.types import Answer, Passage

_CITATION = re.compile(r"\[(\d{1,3})\]")
_LEADING_MARKERS = re.compile(r"^\s*((?:\[\d{1,3}\]\s*)+)")
_BULLET = re.compile(r"^\s*(?:[-*•+]|#{1,6}|\d{1,3}[.)])\s+")
_WORD = re.compile(r"\w")
_LABELS = frozenset({LABEL, DEGRADED_LABEL})


def answer_sentences(text: str) -> list[tuple[str, list[int]]]:
    """The claim sentences of an answer's ``text``: ``[(sentence without markers, cited numbers)]``.

    Cited numbers are the ``[n]`` markers of the sentence, distinct, in order (not checked
    against the passages). See the module docstring for what counts as a sentence.
    """
    sentences: list[tuple[str, list[int]]] = []
    for raw_line in text.splitlines():
        line = _BULLET.sub("", raw_line).strip()
        if not line or line in _LABELS:
            continue
        if line.endswith(":") and not _CITATION.search(line):
            continue
        for start, end in sentence_offsets(line):
            sentence = line[start:end].strip()
            leading = _LEADING_MARKERS.match(sentence)
            if leading and sentences:
                # Markers that open a sentence close the one before it ("... boil. [1] Drain").
                previous, numbers = sentences[-1]
                sentences[-1] = (previous, _merged(numbers, _numbers(leading.group(1))))
                sentence = sentence[leading.end() :]
            plain = " ".join(_CITATION.sub(" ", sentence).split())
            if not _WORD.search(plain):
                continue
            sentences.append((plain, _numbers(sentence)))
    return sentences


def _numbers(text: str) -> list[int]:
    return list(dict.fromkeys(int(n) for n in _CITATION.findall(text)))


def _merged(first: list[int], second: list[int]) -> list[int]:
    return list(dict.fromkeys([*first, *second]))


def passage_sentences(passage: Passage) -> list[str]:
    """The sentences of a passage's (defanged) text, whitespace squashed; the whole text if none."""
    text = text_defang(passage.text)
    found = [" ".join(text[a:b].split()) for a, b in sentence_offsets(text)]
    found = [s for s in found if _WORD.search(s)]
    return found or ([" ".join(text.split())] if text.strip() else [])


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
