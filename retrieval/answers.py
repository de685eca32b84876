"""Cited answers: retrieve, compose a numbered context, answer with ``[n]`` citations.

With a chat model configured the LLM writes the answer from the context only and says so when
the context lacks it; without one, the answer is extractive: the context sentences closest to
the question (cosine similarity of embeddings, plus query-term overlap), each cited.

Reverse packing (seed ``advanced-rag-querying.txt``) puts the best passage last in the prompt,
nearest the question; numbering stays by rank so ``[1]`` is always the best passage.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass, field

import numpy as np

from knowledge.embedders import get_embedder
from knowledge.errors import InvalidInput
from knowledge.ingestion.splitters import sentence_offsets
from knowledge.models import Tenant
from retrieval import strategies
from retrieval.llm import ChatModel, configured_chat_model
from retrieval.search import SearchConfig, chunk_search

NOT_FOUND = "The documents do not contain an answer to this question."
SYSTEM_PROMPT = (
    "You answer questions for a team using only the numbered context passages you are given. "
    "Cite every claim with the passage number in square brackets, like [1] or [2][3]. "
    f"If the passages do not contain the answer, reply exactly: {NOT_FOUND} "
    "Do not use outside knowledge. Be concise."
)
_CITATION = re.compile(r"\[(\d{1,3})\]")
_WORD = re.compile(r"[a-z0-9_]+")
_STOP = frozenset(
    "a an and are as at be by can do does for from how i in is it my of on or the this to what when where which "
    "who why with you your".split()
)


@dataclass
class Citation:
    """A numbered reference to the passage a claim comes from."""

    n: int
    passage: strategies.Passage

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
            "chunk": chunk.ordinal,
            "chunk_id": chunk.pk,
            "score": round(self.passage.score, 6),
            "text": self.passage.text,
        }


@dataclass
class Answer:
    """An answer, its citations (numbers used in the text) and timings in milliseconds."""

    question: str
    text: str
    mode: str  # "llm" | "extractive"
    citations: list[Citation]
    timings_ms: dict[str, float] = field(default_factory=dict)
    found: bool = True

    def as_dict(self) -> dict:
        return {
            "question": self.question,
            "answer": self.text,
            "mode": self.mode,
            "found": self.found,
            "citations": [c.as_dict() for c in self.citations],
            "timings_ms": self.timings_ms,
        }


def compose_context(passages: list[strategies.Passage], *, reverse_pack: bool) -> str:
    """The numbered context block: ``[n] title (section)\\ntext`` per passage, blank-line separated."""
    numbered = [
        f"[{n}] {p.anchor.heading or p.document.title}\n{p.text.strip()}" for n, p in enumerate(passages, start=1)
    ]
    if reverse_pack:
        numbered.reverse()
    return "\n\n".join(numbered)


def question_answer(
    *,
    tenant: Tenant,
    question: str,
    k: int = 5,
    strategy: str = "window",
    window_size: int = 1,
    reverse_pack: bool = True,
    chat_model: ChatModel | None = None,
    use_llm: bool = True,
    source_ids: list[int] | None = None,
    config: SearchConfig | None = None,
) -> Answer:
    """Answer ``question`` from the tenant's documents with numbered citations.

    ``strategy`` is "top_n" or "window"; ``k`` passages go into the context. The LLM is
    ``chat_model`` or the configured one (``use_llm=False`` forces extractive). Raises
    ``InvalidInput`` for bad arguments and ``UpstreamError`` when the LLM fails.
    """
    if strategy not in ("top_n", "window"):
        raise InvalidInput(f"Unknown strategy {strategy!r}; use top_n or window.")
    if not 1 <= k <= 20:
        raise InvalidInput("k must be between 1 and 20.")
    started = time.perf_counter()
    response = chunk_search(tenant=tenant, query=question, k=k, source_ids=source_ids, config=config)
    timings = {"search_ms": response.timings_ms["total_ms"]}
    if strategy == "window":
        passages = strategies.window(tenant, response.results, n=k, size=window_size)
    else:
        passages = strategies.top_n(response.results, n=k)
    model = (chat_model or configured_chat_model()) if use_llm else None
    t = time.perf_counter()
    if not passages:
        answer = Answer(
            question=question.strip(), text=NOT_FOUND, mode="llm" if model else "extractive", citations=[], found=False
        )
    elif model is not None:
        answer = _llm_answer(question.strip(), passages, model, reverse_pack=reverse_pack)
    else:
        answer = _extractive_answer(tenant, question.strip(), passages)
    timings["answer_ms"] = round((time.perf_counter() - t) * 1000, 2)
    timings["total_ms"] = round((time.perf_counter() - started) * 1000, 2)
    answer.timings_ms = timings
    return answer


def cited_numbers(text: str, *, limit: int) -> list[int]:
    """Distinct citation numbers ``[n]`` in ``text`` with 1 <= n <= limit, in order of first use."""
    seen: list[int] = []
    for match in _CITATION.finditer(text):
        n = int(match.group(1))
        if 1 <= n <= limit and n not in seen:
            seen.append(n)
    return seen


def _llm_answer(question: str, passages: list[strategies.Passage], model: ChatModel, *, reverse_pack: bool) -> Answer:
    context = compose_context(passages, reverse_pack=reverse_pack)
    messages = [
        {"role": "system", "content": SYSTEM_PROMPT},
        {
            "role": "user",
            "content": f"Context passages:\n\n{context}\n\nQuestion: {question}\n\nAnswer with citations:",
        },
    ]
    text = model.complete(messages)
    numbers = cited_numbers(text, limit=len(passages))
    found = NOT_FOUND.lower().rstrip(".") not in text.lower()
    # Drop citations outside the context so every [n] in the text resolves.
    text = _CITATION.sub(lambda m: m.group(0) if 1 <= int(m.group(1)) <= len(passages) else "", text)
    return Answer(
        question=question,
        text=text,
        mode="llm",
        found=found,
        citations=[Citation(n=n, passage=passages[n - 1]) for n in numbers],
    )


def _terms(text: str) -> set[str]:
    return {w for w in _WORD.findall(text.lower()) if w not in _STOP and len(w) > 1}


def _extractive_answer(
    tenant: Tenant, question: str, passages: list[strategies.Passage], *, sentences: int = 3
) -> Answer:
    """Pick the context sentences most similar to the question; cite each with its passage."""
    candidates: list[tuple[int, str]] = []
    for n, passage in enumerate(passages, start=1):
        for a, b in sentence_offsets(passage.text):
            sentence = " ".join(passage.text[a:b].split())
            words = len(sentence.split())
            looks_like_heading = words < 8 and not sentence.endswith((".", "!", "?", ":", ")"))
            if 7 <= words <= 80 and not looks_like_heading:
                candidates.append((n, sentence))
    if not candidates:
        candidates = [(n, " ".join(p.text.split())[:400]) for n, p in enumerate(passages, start=1)]
    embedder = get_embedder(tenant.embedder)
    vectors = embedder.embed([question] + [s for _, s in candidates])
    similarity = vectors[1:] @ vectors[0]
    query_terms = _terms(question)
    overlap = np.array([len(query_terms & _terms(s)) / max(1, len(query_terms)) for _, s in candidates])
    rank_prior = np.array([1.0 / (n + 1) for n, _ in candidates])
    score = similarity + 0.3 * overlap + 0.2 * rank_prior
    chosen = sorted(np.argsort(-score)[:sentences], key=lambda i: (candidates[i][0], i))
    used = []
    lines = []
    for i in chosen:
        n, sentence = candidates[i]
        lines.append(f"{sentence} [{n}]")
        if n not in used:
            used.append(n)
    text = "Extractive answer (no LLM configured); the most relevant passages say:\n" + "\n".join(
        f"- {line}" for line in lines
    )
    return Answer(
        question=question,
        text=text,
        mode="extractive",
        citations=[Citation(n=n, passage=passages[n - 1]) for n in sorted(used)],
    )
