"""Rephrase stage: the LLM turns the question (and the conversation so far) into a search query.

Seed ``magic-of-rag-retrieval.txt`` ("Query rephrasing"): the model is given a
``search_our_database(query)`` tool and asked to call it with a detailed search query, "like you
would for a google search, in sentence form", carrying any nuance of the question.
"""

from __future__ import annotations

from dataclasses import replace

from llm import Usage
from retrieval.stages.base import LLMStage, llm_reply
from retrieval.types import QueryPlan

TOOL_NAME = "search_our_database"
TOOL_DESCRIPTION = "Search our internal company database for relevant documents"
TOOL_PARAMETERS = {
    "type": "object",
    "properties": {
        "query": {
            "type": "string",
            "minLength": 1,
            "maxLength": 200,
            "description": (
                "A search query, like you would for a google search, in sentence form. "
                "Take care to provide any important nuance to the question."
            ),
        }
    },
    "required": ["query"],
}
SYSTEM_PROMPT = (
    "You help a team member find documents in the team's knowledge base. Do not answer the "
    f"question yourself: call {TOOL_NAME} once with a detailed search query that captures what "
    "they need, resolving references to earlier messages of the conversation."
)


def rephrase_messages(question: str, history: list[str] | None = None) -> list[dict[str, str]]:
    """The chat messages of a rephrase call: system prompt, earlier questions (oldest first), question."""
    messages = [{"role": "system", "content": SYSTEM_PROMPT}]
    for earlier in (history or [])[-5:]:
        messages.append({"role": "user", "content": earlier})
    messages.append({"role": "user", "content": question})
    return messages


def query_rephrase(plan: QueryPlan, *, llm, history: list[str] | None = None) -> tuple[QueryPlan, Usage, dict]:
    """``plan`` with both retrievers searching the LLM's rephrased query.

    Returns (plan, LLM usage, trace summary). Raises ``llm.LLMError`` when the call
    fails or its arguments stay malformed; the pipeline then keeps the question as it was.
    """
    arguments, completion = llm.tool_call(
        rephrase_messages(plan.question, history),
        name=TOOL_NAME,
        description=TOOL_DESCRIPTION,
        parameters=TOOL_PARAMETERS,
        max_tokens=128,  # room for 200 characters of query inside the JSON
    )
    query = " ".join(str(arguments["query"]).split())[:1000] or plan.question
    rewritten = replace(plan, lexical_query=query, dense_text=query, notes=[*plan.notes, f"rephrased: {query}"])
    return rewritten, completion.usage, {"query": query}


class Rephrase(LLMStage):
    """The ``rephrase`` step: the LLM's search query replaces the question (``query_rephrase``).

    Fallback: the question as asked (a skipped step without an LLM)."""

    name = "rephrase"

    def with_llm(self, state, step):
        state.plan, step.usage, step.summary = query_rephrase(state.plan, llm=state.llm, history=state.request.history)
        return state

    def fallback(self, state, step, *, reason, error):
        step.summary = {"fallback": "the question as asked", **llm_reply(error)} if error else {"skipped": reason}
        return state
