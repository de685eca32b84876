"""Condense stage, LLM-free: a follow-up question made standalone by carrying earlier key terms.

In a conversation, "and how do I undo it?" only makes sense with the turns before it. With an
LLM, the ``rephrase`` stage rewrites the follow-up from the conversation (seed
``magic-of-rag-retrieval.txt``, "Query rephrasing"). Without one, this stage appends the key
terms of the previous questions that the follow-up does not already contain: the words
PostgreSQL's ``english`` analyzer keeps (the one BM25 indexes with, so stop words drop out),
newest question first, at most ``MAX_CARRIED_TERMS``. Both retrievers then search the
condensed query.
"""

from __future__ import annotations

import re
from dataclasses import replace

from core.replicas import read_connection
from retrieval.stages.base import LLMStage
from retrieval.stages.rewrite.rephrase import query_rephrase
from retrieval.types import QueryPlan

MAX_CARRIED_TERMS = 8
MAX_TURNS = 3  # previous questions looked at, newest first
_WORD = re.compile(r"[^\W_][\w'-]*", re.UNICODE)


def _lexemes(words: list[str]) -> list[str]:
    """Each word's ``english`` lexeme ('' for a stop word), in order, from one query."""
    if not words:
        return []
    with read_connection().cursor() as cursor:
        cursor.execute(
            "SELECT coalesce((SELECT string_agg(lexeme, ' ') FROM unnest(to_tsvector('english', w.word))), '')"
            " FROM unnest(%s::text[]) WITH ORDINALITY AS w(word, n) ORDER BY w.n",
            [words],
        )
        return [row[0] for row in cursor.fetchall()]


def carried_terms(question: str, history: list[str]) -> list[str]:
    """The key words of the last ``MAX_TURNS`` questions of ``history`` (oldest first) that
    ``question`` lacks: distinct by lexeme, newest question first, at most ``MAX_CARRIED_TERMS``."""
    earlier = [_WORD.findall(text) for text in reversed(history[-MAX_TURNS:])]
    current = _WORD.findall(question)
    words = [w for turn in earlier for w in turn]
    lexemes = _lexemes(current + words)
    seen = {lexeme for lexeme in lexemes[: len(current)] if lexeme}
    terms: list[str] = []
    for word, lexeme in zip(words, lexemes[len(current) :], strict=True):
        if lexeme and lexeme not in seen:
            seen.add(lexeme)
            terms.append(word)
            if len(terms) == MAX_CARRIED_TERMS:
                break
    return terms


def query_condense(plan: QueryPlan, *, history: list[str]) -> tuple[QueryPlan, dict]:
    """``plan`` with the previous questions' key terms appended to both retrievers' query.

    ``history`` holds the conversation's earlier questions, oldest first. Returns (plan, trace
    summary ``{"carried_terms", "query"}``); a plan without earlier questions or without new
    key terms comes back unchanged.
    """
    terms = carried_terms(plan.question, history) if history else []
    if not terms:
        return plan, {"carried_terms": [], "query": plan.lexical_query}
    query = f"{plan.lexical_query} {' '.join(terms)}"
    condensed = replace(plan, lexical_query=query, dense_text=query, notes=[*plan.notes, f"condensed: {query}"])
    return condensed, {"carried_terms": terms, "query": query}


class Condense(LLMStage):
    """The ``condense`` step of a follow-up question (a run with ``history``): the LLM rephrases
    it from the conversation (``query_rephrase``). Fallback: the earlier questions' key terms
    are carried into the query (``query_condense``). Inactive when the pipeline's own rephrase
    stage will do it with the LLM."""

    name = "condense"

    def active(self, state):
        return bool(state.request.history) and not ("rephrase" in state.spec.rewrites and state.llm is not None)

    def with_llm(self, state, step):
        state.plan, step.usage, summary = query_rephrase(state.plan, llm=state.llm, history=state.request.history)
        step.summary = {"by": "llm", "history": len(state.request.history), **summary}
        return state

    def fallback(self, state, step, *, reason, error):
        state.plan, summary = query_condense(state.plan, history=state.request.history)
        failed = {"fallback": "key terms"} if error else {}
        step.summary = {"by": "key terms", "history": len(state.request.history), **summary, **failed}
        return state
