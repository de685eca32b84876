"""Generate stage: the answer, from the LLM with citations or extracted from the passages.

``Generate`` is the ``generate`` step every answering pipeline ends with. With an LLM, in one of
two styles (``GenerateConfig.answer_style``):

- ``quoted`` (the default): the LLM writes only the short answer and names its passages; the
  explanation is the passages' sentences that support it, each cited (``quoted.quoted_generate``;
  streamed as one ``short_answer`` event, then the explanation as one ``token`` event);
- ``written``: the LLM writes the short answer and a cited explanation
  (``cited.answer_generate``; when the run streams, the explanation's text goes out as ``token``
  events and the short answer as one ``short_answer`` event), checked by the citation safety
  net (``citations.citations_check``, with the tenant's embedder).

Without an LLM, or when the call fails, the LLM-free fallback is the extractive answer
(``extractive.answer_extract``). With personalization on
and someone signed in, the prompt gains the asker's user layer, composed by the ``user_layer``
hook of the run's registry (``retrieval.registry``: ``KB_PERSON_HOOKS``).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial

from core.schema import setting
from llm import Usage
from retrieval.stages.base import LLMStage
from retrieval.stages.generate.cited import NOT_FOUND, answer_generate, answer_stream
from retrieval.stages.generate.extractive import DEGRADED_LABEL, answer_extract
from retrieval.stages.generate.quoted import quoted_generate, quoted_stream
from retrieval.types import Answer

STYLES = ("quoted", "written")


@dataclass(frozen=True)
class GenerateConfig:
    """Settings of the ``generate`` stage: the LLM answer's style and its prompt's context.

    Styles as in the module docstring. ``quoted`` is the default: on the 50 HotpotQA dev questions
    with the local Qwen model on 2 cores it takes 1.11 x the time of a bare "answer only" prompt,
    where the written style took 2.75 x, its short answers' F1 is 0.50 against that prompt's 0.49,
    and every sentence is cited (``benchmarks/answers.py``; ``docs/benchmarks.md``)."""

    answer_style: str = setting(
        "quoted",
        choices=STYLES,
        doc="LLM answers: the model writes the short answer and the explanation quotes the passages "
        "(`quoted`), or the model writes both (`written`)",
    )
    context_sentences: int = setting(
        0,
        range=(0, 200),
        integer=True,
        doc="quoted style: the prompt shows only the passages' N sentences best for the question (0 = whole passages)",
    )


def user_layer_for(state) -> tuple[str | None, dict | None]:
    """The answer prompt's user layer and its trace summary when the request personalizes and
    someone is signed in, else ``(None, None)``."""
    compose = state.registry.user_layer
    if not state.request.personalize or state.user is None or compose is None:
        return None, None
    layer = compose(tenant=state.tenant, user=state.user, where=state.where, question=state.request.question)
    return layer if layer is not None else (None, None)


class Generate(LLMStage):
    """The ``generate`` step: ``state.answer`` from ``state.passages`` (module docstring).

    Without passages the answer says the documents hold none. Fallback: the extractive answer,
    labelled as degraded when the LLM failed in this run."""

    name = "generate"
    config = GenerateConfig

    def active(self, state):
        return state.answering

    def apply(self, state, step):
        if not state.passages:
            state.answer = Answer(
                question=state.request.question, text=NOT_FOUND, mode="extractive", citations=[], found=False
            )
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
        llm, question, passages = state.llm, state.request.question, state.passages
        options = {"llm": llm, "reverse_pack": state.request.reverse_pack, "user_layer": user_layer}
        config = self.settings(state)
        style = config.answer_style
        if style == "quoted":
            generate = partial(quoted_generate, context_limit=config.context_sentences)
            stream = partial(quoted_stream, context_limit=config.context_sentences)
        else:
            embedder = state.tenant.embedder
            generate = partial(answer_generate, embedder=embedder)
            stream = partial(answer_stream, embedder=embedder)
        if state.streaming:
            events = stream(question, passages, **options)
            while True:
                try:
                    event, text = next(events)
                except StopIteration as done:
                    answer = done.value
                    break
                state.emit(event, {"text": text})
            step.usage = llm.last_stream_usage or Usage(llm_calls=1)
        else:
            answer, step.usage = generate(question, passages, **options)
        state.answer = answer
        step.summary = {"mode": "llm", "style": style, "model": getattr(llm, "name", ""), "reply": answer.text}
        step.summary["short_answer"] = answer.short_answer
        step.summary["user_layer"] = layer_summary
        return state

    def fallback(self, state, step, *, reason, error):
        kwargs = {"label": DEGRADED_LABEL} if state.degraded else {}
        state.answer = answer_extract(state.request.question, state.passages, embedder=state.tenant.embedder, **kwargs)
        step.summary = {"mode": "extractive", **({"fallback": True} if state.degraded else {})}
        return state
