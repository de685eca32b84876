"""Expand stage: OR-expansion of the lexical query, by the LLM or by pseudo-relevance feedback.

* LLM (seed ``advanced-rag-querying.txt``, "Enriching Queries with Synonyms"): the model lists
  synonyms and related terms a relevant document might use; they join the question's own terms,
  OR-ed (any term may match), at a lower weight.
* RM3 (Lavrenko & Croft 2001, "Relevance-Based Language Models"; RM3 as in Abdul-Jaleel et al.
  2004 and Anserini): the top ``fb_docs`` BM25 chunks are taken as relevant; each contributes its
  L1-normalized term distribution weighted by its retrieval score; the ``fb_terms`` heaviest terms
  form a relevance model, which is interpolated with the (L1-normalized) original query:
  ``w(t) = original_weight * P(t|Q) + (1 - original_weight) * P(t|R)``. Anserini's defaults:
  fb_docs = 10, fb_terms = 10, original weight 0.5; like Anserini, feedback terms found in more
  than 10 % of the tenant's chunks (and in more than one) are ignored. Needs no LLM: it runs on the tenant's postings
  and term statistics.

Both change only the lexical side (``QueryPlan.lexical_terms``); the dense side still embeds the
question.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace

from core.schema import setting
from knowledge.models import Chunk, CorpusStatistic, TermStatistic
from llm import Usage
from retrieval.config import SearchConfig
from retrieval.filters import RetrievalFilter
from retrieval.stages.base import LLMStage, llm_reply
from retrieval.stages.retrieve.lexical import bm25_search, query_lexemes
from retrieval.types import QueryPlan

_TERM = re.compile(r"^[a-z][a-z0-9_]{1,39}$")
EXPANSION_SCHEMA = {
    "type": "object",
    "properties": {
        "terms": {
            "type": "array",
            "items": {"type": "string", "minLength": 1, "maxLength": 40},
            "maxItems": 10,
        }
    },
    "required": ["terms"],
}
SYSTEM_PROMPT = (
    "You help a search engine find documents. For the user's question, list key terms, synonyms "
    "and related terms or phrases that relevant documents are likely to contain (at most 10). "
    'Reply with JSON only: {"terms": ["...", "..."]}. No explanations.'
)


def expand_messages(question: str) -> list[dict[str, str]]:
    """The chat messages of an LLM expansion call."""
    return [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": question}]


def _original_terms(plan: QueryPlan) -> dict[str, float]:
    """The query's own lexemes, L1-normalized (``P(t|Q)``); weighted terms of an earlier stage win."""
    if plan.lexical_terms:
        total = sum(plan.lexical_terms.values())
        return {t: w / total for t, w in plan.lexical_terms.items()}
    counts = query_lexemes(plan.lexical_query)
    total = sum(counts.values()) or 1
    return {t: c / total for t, c in counts.items()}


def query_expand_llm(plan: QueryPlan, *, llm, weight: float = 0.5) -> tuple[QueryPlan, Usage, dict]:
    """``plan`` whose lexical side also matches the LLM's synonyms and related terms.

    The question's lexemes keep weight 1; each new lexeme weighs ``weight``. Returns (plan, LLM
    usage, trace summary). ``llm.LLMError`` when the LLM fails.
    """
    data, completion = llm.structured(
        expand_messages(plan.question), schema=EXPANSION_SCHEMA, name="expansion", max_tokens=220
    )
    phrases = [" ".join(str(term).split()) for term in data["terms"]][:10]
    original = {t: 1.0 for t in (plan.lexical_terms or query_lexemes(plan.lexical_query))}
    added = {t: weight for t in query_lexemes(" ".join(phrases)) if t not in original}
    terms = {**original, **added}
    rewritten = replace(plan, lexical_terms=terms, notes=[*plan.notes, f"LLM expansion: {', '.join(phrases)}"])
    return rewritten, completion.usage, {"method": "llm", "phrases": phrases, "added_terms": sorted(added)}


def query_expand_rm3(
    plan: QueryPlan,
    *,
    where: RetrievalFilter,
    config: SearchConfig,
    fb_docs: int = 10,
    fb_terms: int = 10,
    original_weight: float = 0.5,
    max_df_ratio: float = 0.1,
) -> tuple[QueryPlan, Usage, dict]:
    """``plan`` whose lexical side searches the RM3 expansion of its query (no LLM).

    Feedback comes from a first BM25 pass over the chunks ``where`` allows. When the first pass
    finds nothing, the plan is returned unchanged. Returns (plan, zero usage, trace summary with
    the expansion terms and their weights).
    """
    original = _original_terms(plan)
    if not original:
        return plan, Usage(), {"method": "rm3", "skipped": "the query has no searchable terms"}
    feedback = bm25_search(where=where, terms=original, limit=fb_docs, k1=config.bm25_k1, b=config.bm25_b)
    if not feedback:
        return plan, Usage(), {"method": "rm3", "skipped": "no feedback chunks"}
    scores = dict(feedback)
    relevance: dict[str, float] = {}
    for chunk_id, term_freqs in Chunk.objects.filter(pk__in=scores, tenant_id=where.tenant_id).values_list(
        "pk", "term_freqs"
    ):
        length = sum(term_freqs.values()) or 1
        for term, tf in term_freqs.items():
            if _TERM.match(term):
                relevance[term] = relevance.get(term, 0.0) + scores[chunk_id] * tf / length
    chunk_count = CorpusStatistic.objects.filter(tenant_id=where.tenant_id).values_list("chunk_count", flat=True)
    # At least 1: in a tiny corpus every term is in over 10 % of the chunks.
    limit = max(max_df_ratio * (chunk_count[0] if chunk_count else 0), 1)
    common = set(
        TermStatistic.objects.filter(tenant_id=where.tenant_id, lexeme__in=list(relevance), df__gt=limit).values_list(
            "lexeme", flat=True
        )
    )
    kept = sorted(((t, w) for t, w in relevance.items() if t not in common), key=lambda pair: (-pair[1], pair[0]))
    kept = kept[:fb_terms]
    total = sum(w for _, w in kept) or 1.0
    model = {t: w / total for t, w in kept}
    terms = {
        t: original_weight * original.get(t, 0.0) + (1 - original_weight) * model.get(t, 0.0)
        for t in {*original, *model}
    }
    rewritten = replace(plan, lexical_terms=terms, notes=[*plan.notes, "RM3 expansion"])
    summary = {
        "method": "rm3",
        "fb_docs": len(feedback),
        "terms": {t: round(w, 4) for t, w in sorted(terms.items(), key=lambda pair: -pair[1])},
    }
    return rewritten, Usage(), summary


EXPANSIONS = ("auto", "llm", "rm3")


@dataclass(frozen=True)
class ExpandConfig:
    """Settings of the ``expand`` stage (RM3's defaults are Anserini's)."""

    expansion: str = setting(
        "auto", choices=EXPANSIONS, doc="LLM synonyms (`llm`), RM3 (`rm3`), or the LLM when one is configured (`auto`)"
    )
    rm3_fb_docs: int = setting(10, range=(1, 100), integer=True, doc="RM3: feedback chunks of the first BM25 pass")
    rm3_fb_terms: int = setting(10, range=(1, 100), integer=True, doc="RM3: expansion terms kept")
    rm3_original_weight: float = setting(0.5, range=(0.0, 1.0), doc="RM3: weight of the original query terms")
    llm_expansion_weight: float = setting(0.5, range=(0.0, 1.0), doc="weight of the terms the LLM adds")


class Expand(LLMStage):
    """The ``expand`` step: OR-expansion of the lexical query by LLM synonyms (``query_expand_llm``).

    Fallback, and the method itself with ``expansion: rm3`` (or ``auto`` without an LLM): RM3
    (``query_expand_rm3``), from a first BM25 pass."""

    name = "expand"
    config = ExpandConfig

    def apply(self, state, step):
        expansion = self.settings(state).expansion
        if expansion == "rm3" or (expansion == "auto" and state.llm is None):
            return self.fallback(state, step, reason="", error=None)
        return super().apply(state, step)

    def with_llm(self, state, step):
        weight = self.settings(state).llm_expansion_weight
        state.plan, step.usage, step.summary = query_expand_llm(state.plan, llm=state.llm, weight=weight)
        return state

    def fallback(self, state, step, *, reason, error):
        config = self.settings(state)
        state.plan, _, summary = query_expand_rm3(
            state.plan,
            where=state.where,
            config=state.spec.search,
            fb_docs=config.rm3_fb_docs,
            fb_terms=config.rm3_fb_terms,
            original_weight=config.rm3_original_weight,
        )
        step.summary = {**summary, "fallback": "rm3", **llm_reply(error)} if error else summary
        return state
