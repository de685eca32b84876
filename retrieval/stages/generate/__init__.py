"""Generate stage: the answer, written by the LLM with citations or extracted from the passages.

``Generate`` is the ``generate`` step every answering pipeline ends with: the LLM's short answer
and cited explanation (``cited.answer_generate``; when the run streams, the explanation's text
goes out as ``token`` events and the short answer as one ``short_answer`` event), checked by the
citation safety net (``citations.citations_check``, with the tenant's embedder), or, as its
LLM-free fallback, the extractive answer (``extractive.answer_extract``). With personalization on
and someone signed in, the prompt gains the asker's user layer, composed by the ``user_layer``
hook (``retrieval.hooks``: the app that owns people's profiles provides it).
"""

from __future__ import annotations

from llm import Usage
from retrieval import hooks
from retrieval.stages.base import LLMStage
from retrieval.stages.generate.cited import NOT_FOUND, answer_generate, answer_stream
from retrieval.stages.generate.extractive import DEGRADED_LABEL, answer_extract
from retrieval.types import Answer


def user_layer_for(state) -> tuple[str | None, dict | None]:
    """The answer prompt's user layer and its trace summary when the request personalizes and
    someone is signed in, else ``(None, None)``."""
    compose = hooks.person.user_layer
    if not state.options.get("personalize", True) or state.user is None or compose is None:
        return None, None
    layer = compose(tenant=state.tenant, user=state.user, where=state.where, question=state.question)
    return layer if layer is not None else (None, None)


class Generate(LLMStage):
    """The ``generate`` step: ``state.answer`` from ``state.passages`` (module docstring).

    Without passages the answer says the documents hold none. Fallback: the extractive answer,
    labelled as degraded when the LLM failed in this run."""

    name = "generate"

    def active(self, state):
        return state.answering

    def apply(self, state, step):
        if not state.passages:
            state.answer = Answer(question=state.question, text=NOT_FOUND, mode="extractive", citations=[], found=False)
            step.summary = {"mode": "none", "reason": "no passages"}
        else:
            state = super().apply(state, step)
        answer = state.answer
        step.summary["citations"] = [c.n for c in answer.citations]
        if answer.sentences:
            step.summary["coverage"] = answer.citation_coverage
            step.summary["added"] = sum(1 for s in answer.sentences if s["added"])
            step.summary["unsupported"] = len(answer.unsupported)
        return state

    def with_llm(self, state, step):
        user_layer, layer_summary = user_layer_for(state)
        llm, question, passages = state.llm, state.question, state.passages
        options = {"llm": llm, "reverse_pack": state.reverse_pack, "user_layer": user_layer}
        embedder = state.tenant.embedder
        if state.streaming:
            events = answer_stream(question, passages, embedder=embedder, **options)
            while True:
                try:
                    event, text = next(events)
                except StopIteration as done:
                    answer = done.value
                    break
                state.emit(event, {"text": text})
            step.usage = llm.last_stream_usage or Usage(llm_calls=1)
        else:
            answer, step.usage = answer_generate(question, passages, embedder=embedder, **options)
        state.answer = answer
        step.summary = {"mode": "llm", "model": getattr(llm, "name", ""), "reply": answer.text}
        step.summary["short_answer"] = answer.short_answer
        step.summary["user_layer"] = layer_summary
        return state

    def fallback(self, state, step, *, reason, error):
        kwargs = {"label": DEGRADED_LABEL} if state.degraded else {}
        state.answer = answer_extract(state.question, state.passages, embedder=state.tenant.embedder, **kwargs)
        step.summary = {"mode": "extractive", **({"fallback": True} if state.degraded else {})}
        return state
