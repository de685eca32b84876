"""A scripted LLM double with ``LLMClient``'s interface, for prompt and parsing logic only."""

from __future__ import annotations

import json

from llm import Completion, LLMBadOutput, LLMError, Usage


class ScriptedLLM:
    """Replies from a script: ``chat`` returns ``chat_reply``, ``structured``/``tool_call`` return dicts.

    A reply that is an ``LLMError`` instance is raised instead. Every call's messages are
    recorded in ``calls`` as ``(method, messages)``. ``structured_replies``, when given, is a
    sequence of ``structured`` replies consumed in order (then ``structured_reply`` again);
    ``cost_usd`` is the cost each call reports. ``structured_reply`` may be a callable
    ``structured_reply(messages) -> dict`` (or an ``LLMError`` to raise), to reply per request.
    ``map`` runs its calls one after another, in order (``LLMClient.map``'s contract).

    The answer call (``structured``/``stream`` with ``name="answer"``) replies ``answer_reply``:
    a dict is the model's JSON, a str its raw text (broken JSON: ``structured`` then raises
    ``LLMBadOutput`` carrying it, as the client does after its retry). Without ``answer_reply``
    the model ignores the format and writes ``chat_reply`` as prose. Streamed JSON comes in
    pieces of 5 characters, so escapes and keys are cut across deltas.
    """

    name = "scripted"

    def __init__(
        self,
        *,
        chat_reply="",
        structured_reply=None,
        tool_reply=None,
        structured_replies=None,
        cost_usd=0.0,
        answer_reply=None,
    ):
        self.chat_reply = chat_reply
        self.answer_reply = answer_reply
        self.structured_reply = structured_reply
        self.structured_replies = list(structured_replies or [])
        self.cost_usd = cost_usd
        self.tool_reply = tool_reply
        self.calls: list[tuple[str, list[dict]]] = []
        self.last_stream_usage = None

    def _reply(self, method: str, messages, value):
        self.calls.append((method, messages))
        if isinstance(value, LLMError):
            raise value
        text = value if isinstance(value, str) else json.dumps(value)
        usage = Usage(llm_calls=1, tokens_in=100, tokens_out=10, cost_usd=self.cost_usd)
        return Completion(text=text, usage=usage, ms=1.0, model=self.name)

    def chat(self, messages, *, max_tokens=512, temperature=0.0):
        return self._reply("chat", messages, self.chat_reply)

    def stream(self, messages, *, max_tokens=512, schema=None, name="output"):
        if schema is not None and name == "answer" and self.answer_reply is not None:
            completion = self._reply("stream", messages, self.answer_reply)
            self.last_stream_usage = completion.usage
            for start in range(0, len(completion.text), 5):
                yield completion.text[start : start + 5]
            return
        completion = self._reply("stream", messages, self.chat_reply)
        self.last_stream_usage = completion.usage
        for word in completion.text.split(" "):
            yield word + " "

    def structured(self, messages, *, schema, name, max_tokens=512, retry=True, schema_in_prompt=True):
        if name == "answer":
            return self._answer(messages)
        value = self.structured_replies.pop(0) if self.structured_replies else self.structured_reply
        if callable(value):
            value = value(messages)
        return value, self._reply("structured", messages, value)

    def _answer(self, messages):
        reply = self.chat_reply if self.answer_reply is None else self.answer_reply
        completion = self._reply("structured", messages, reply)
        if isinstance(reply, dict):
            return reply, completion
        error = LLMBadOutput("The LLM did not return valid answer JSON (not JSON).", usage=completion.usage)
        error.reply = completion.text
        raise error

    def tool_call(self, messages, *, name, description, parameters, max_tokens=256):
        return self.tool_reply, self._reply("tool_call", messages, self.tool_reply)

    def map(self, fn, items, *, concurrency=None):
        results = []
        for item in items:
            try:
                results.append(fn(item))
            except Exception as exc:  # LLMClient.map leaves a raised exception in its slot
                results.append(exc)
        return results
