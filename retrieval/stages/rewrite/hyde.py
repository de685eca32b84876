"""HyDE stage: the dense retriever searches with the embedding of a hypothetical answer passage.

Gao, Ma, Lin & Callan 2022, "Precise Zero-Shot Dense Retrieval without Relevance Labels" (HyDE):
an LLM writes a passage that would answer the question; its factual accuracy does not matter,
its vocabulary and shape do, since documents are then matched to a document rather than to a
question. As in the paper, the query's own embedding is averaged in (``mix`` is the weight of the
hypothetical passage: 0.5 = the paper's mean of one passage and the query; 1.0 = passage alone).
The prompt follows seed ``advanced-rag-querying.txt``.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from core.schema import setting
from knowledge.embedders import get_embedder
from llm import Usage
from retrieval.stages.base import LLMStage, llm_reply
from retrieval.types import QueryPlan

SYSTEM_PROMPT = (
    "You write hypothetical documents for a retrieval system. Given a question, write a short, "
    "factual-sounding passage (80-150 words) in the formal tone of a reference manual that would "
    "contain its answer. Use the terminology such a document would use. Do not mention the "
    "question, do not add citations, and output only the passage."
)


def hyde_messages(question: str) -> list[dict[str, str]]:
    """The chat messages of a HyDE call."""
    return [
        {"role": "system", "content": SYSTEM_PROMPT},
        {"role": "user", "content": f"Question: {question}\n\nHypothetical passage:"},
    ]


def hyde_embed(question_vector, passage_vector, *, mix: float) -> list[float]:
    """The unit-length weighted mean ``(1 - mix) * question + mix * passage`` (inputs unit vectors)."""
    vector = (1.0 - mix) * np.asarray(question_vector, dtype=np.float32) + mix * np.asarray(
        passage_vector, dtype=np.float32
    )
    norm = float(np.linalg.norm(vector))
    return (vector / norm if norm > 0 else vector).tolist()


def query_hyde(plan: QueryPlan, *, llm, embedder: str, mix: float = 0.5) -> tuple[QueryPlan, Usage, dict]:
    """``plan`` whose dense side searches the HyDE vector; the lexical side is unchanged.

    Returns (plan, LLM usage, trace summary with the passage). ``llm.LLMError`` when
    the LLM fails; the pipeline then searches with the question's own embedding.
    """
    completion = llm.chat(hyde_messages(plan.question), max_tokens=200)
    passage = completion.text.strip()
    question_vector, passage_vector = get_embedder(embedder).embed([plan.dense_text, passage])
    vector = hyde_embed(question_vector, passage_vector, mix=mix)
    rewritten = replace(plan, dense_vector=vector, notes=[*plan.notes, "HyDE passage embedded"])
    return rewritten, completion.usage, {"passage": passage, "mix": mix}


@dataclass(frozen=True)
class HydeConfig:
    """Settings of the ``hyde`` stage."""

    hyde_mix: float = setting(0.5, range=(0.0, 1.0), doc="the hypothetical passage's share of the dense query vector")


class HyDE(LLMStage):
    """The ``hyde`` step: the dense side searches a hypothetical passage's embedding (``query_hyde``).

    Fallback: the question as asked (a skipped step without an LLM)."""

    name = "hyde"
    config = HydeConfig

    def with_llm(self, state, step):
        mix = self.settings(state).hyde_mix
        state.plan, step.usage, step.summary = query_hyde(
            state.plan, llm=state.llm, embedder=state.tenant.embedder, mix=mix
        )
        return state

    def fallback(self, state, step, *, reason, error):
        step.summary = {"fallback": "the question as asked", **llm_reply(error)} if error else {"skipped": reason}
        return state
