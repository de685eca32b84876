"""One client for any OpenAI-compatible chat endpoint (OpenAI, Azure, vLLM, Ollama, llama.cpp).

``LLMClient`` wraps ``openai.OpenAI`` with what production calls need: a timeout per request,
retries with exponential backoff on transient failures (429, 5xx, connection errors,
timeouts; ``Retry-After`` honoured), a circuit breaker per endpoint, a bound on concurrent
requests, token usage and cost per call, and JSON output checked against a JSON schema on our
side. Every failure is an ``LLMError`` (a ``core.errors.UpstreamError``) with a short message.

Every public call made inside ``llm.metering.llm_metered`` counts against that tenant's daily LLM
tokens: it is refused before any request (``LLMQuotaExceeded``) once they are used up, and its
tokens are recorded after it (``llm.observation``).
"""

from __future__ import annotations

import contextvars
import json
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import closing
from typing import Any, TypeVar

import openai
from django.conf import settings
from jsonschema.exceptions import best_match

from llm.endpoint import (
    DEFAULT_BASE_URL,
    ChatEndpoint,
    Completion,
    Messages,
    llm_error,
    message_content,
    ms_since,
    response_model,
    tool_calls,
)
from llm.errors import (
    LLMBadOutput,
    LLMEmptyReply,
    LLMError,
    LLMHTTPError,
    LLMTimeout,
    LLMUnavailable,
)
from llm.json_schema import JSON_MODES, parse_json_object, schema_name, schema_validator, with_schema_instruction
from llm.observation import ObservedCall
from llm.usage import Usage

__all__ = [
    "Completion",
    "LLMBadOutput",
    "LLMClient",
    "LLMEmptyReply",
    "LLMError",
    "LLMHTTPError",
    "LLMTimeout",
    "LLMUnavailable",
    "configured_llm",
]

T = TypeVar("T")


class LLMClient(ChatEndpoint):
    """Chat completions from one model at one OpenAI-compatible endpoint. Thread-safe.

    ``model``: the model name at the endpoint. ``base_url``: the endpoint's ``/v1`` URL
    (default ``OPENAI_BASE_URL``, else OpenAI's). ``api_key``: default ``OPENAI_API_KEY``.
    ``timeout_s``: seconds per HTTP request (default ``KB_LLM_TIMEOUT_S``). ``retries``: extra
    attempts after a transient failure (default ``KB_LLM_RETRIES``). ``concurrency``: most
    requests this client has in flight at once, and ``map``'s default pool size (default
    ``KB_LLM_CONCURRENCY``). ``prices``: ``{model: [usd_per_million_in, usd_per_million_out]}``
    (default ``KB_LLM_PRICES``). ``backoff_s``: the first retry's base delay in seconds; it
    doubles per retry (with jitter), capped at 30 s.

    The circuit breaker (``KB_LLM_CIRCUIT_FAILURES``, ``KB_LLM_CIRCUIT_COOLDOWN_S``) is shared
    by all clients of the same base URL and model; each failed HTTP attempt counts. Requests,
    retries and cost are ``llm.endpoint.ChatEndpoint``'s; JSON output is checked with
    ``llm.json_schema``; every public call is an ``llm.observation.ObservedCall``.
    """

    def __repr__(self) -> str:
        return f"LLMClient(model={self.model!r}, base_url={self.base_url!r})"

    @property
    def last_stream_usage(self) -> Usage | None:
        """Usage of the last ``stream()`` this thread read to the end (``None`` before any)."""
        return getattr(self._local, "stream_usage", None)

    # --- Plain text ---------------------------------------------------------------------------

    def chat(self, messages: Messages, *, max_tokens: int = 512, temperature: float = 0.0) -> Completion:
        """The assistant's reply to ``messages`` (OpenAI chat format: ``[{"role", "content"}]``).

        ``max_tokens`` caps the reply's tokens. Raises ``LLMEmptyReply`` for an empty reply,
        ``LLMTimeout``, ``LLMUnavailable`` or ``LLMHTTPError`` when the endpoint fails after
        retries, ``LLMBadOutput`` when its response cannot be read.
        """
        with ObservedCall(self, "chat", max_tokens=max_tokens, temperature=temperature) as call:
            return call.completed(self._chat(messages, max_tokens=max_tokens, temperature=temperature))

    def _chat(self, messages: Messages, *, max_tokens: int, temperature: float) -> Completion:
        started = time.perf_counter()
        response = self._create(messages=messages, max_tokens=max_tokens, temperature=temperature)
        text = message_content(response).strip()
        usage = self._usage(response, messages, text)
        if not text:
            raise LLMEmptyReply("The LLM returned an empty reply.", usage=usage)
        return Completion(text=text, usage=usage, ms=ms_since(started), model=response_model(response, self.model))

    def stream(
        self,
        messages: Messages,
        *,
        max_tokens: int = 512,
        schema: dict[str, Any] | None = None,
        name: str = "output",
    ) -> Iterator[str]:
        """Yield the reply to ``messages`` as text deltas while the model writes it.

        The request is sent on the first ``next()``. Once the iterator is exhausted,
        ``last_stream_usage`` holds the usage (the endpoint's when it reports usage in the
        stream, else counted with tiktoken). Raises the errors of ``chat()``; only opening the
        stream is retried, a stream that breaks off raises ``LLMTimeout`` or ``LLMUnavailable``.

        With ``schema`` (JSON Schema, named ``name``) the reply is asked for as JSON the way
        ``structured()`` asks (``response_format`` forms tried in turn, remembered), and the
        deltas are the JSON's text as it is written: it is neither parsed nor validated here
        (the caller reads it as it comes, e.g. ``retrieval.stages.generate.fields``).
        """
        output = "text" if schema is None else "json"
        with (
            ObservedCall(self, "stream", max_tokens=max_tokens, temperature=0.0, output=output) as call,
            closing(self._stream(messages, max_tokens=max_tokens, schema=schema, name=name)) as pieces,
        ):
            for piece in pieces:
                call.piece()
                yield piece
            call.usage = self.last_stream_usage

    def _stream(
        self, messages: Messages, *, max_tokens: int, schema: dict[str, Any] | None, name: str
    ) -> Iterator[str]:
        params: dict[str, Any] = {"messages": messages, "max_tokens": max_tokens, "temperature": 0.0, "stream": True}
        if schema is None:
            chunks = self._stream_open(params)
        else:
            schema_validator(schema)
            modes = [self._json_mode] if self._json_mode else list(JSON_MODES)
            for mode in modes:
                sent = messages if mode == "json_schema" else with_schema_instruction(messages, schema)
                try:
                    chunks = self._stream_open({**params, "messages": sent, **JSON_MODES[mode](schema, name)})
                except LLMHTTPError as exc:
                    if exc.rejected and mode != modes[-1]:
                        continue  # this form of response_format is not accepted here: try the next
                    raise
                self._json_mode = mode
                messages = sent
                break
        yield from self._stream_read(chunks, messages)

    def _stream_open(self, params: dict[str, Any]) -> Any:
        """Open a streamed request, asking for usage in the stream while the endpoint accepts it."""
        if not self._stream_usage_supported:
            return self._create(**params)
        try:
            return self._create(**params, stream_options={"include_usage": True})
        except LLMHTTPError as exc:
            if not exc.rejected:
                raise
        chunks = self._create(**params)  # rejected again: something else was refused, it raises
        self._stream_usage_supported = False
        return chunks

    def _stream_read(self, chunks: Any, messages: Messages) -> Iterator[str]:
        """The text deltas of an open stream; its usage into ``last_stream_usage`` at the end."""
        parts: list[str] = []
        reported = None
        try:
            for chunk in chunks:
                if getattr(chunk, "usage", None):
                    reported = chunk
                for choice in getattr(chunk, "choices", None) or []:
                    delta = getattr(choice.delta, "content", None) if choice.delta else None
                    if delta:
                        parts.append(delta)
                        yield delta
        except openai.APIError as exc:
            raise llm_error(exc, self) from exc
        finally:
            close = getattr(chunks, "close", None)
            if close:
                close()
        text = "".join(parts)
        usage = self._usage(reported, messages, text)
        self._local.stream_usage = usage
        if not text.strip():
            raise LLMEmptyReply("The LLM returned an empty reply.", usage=usage)

    # --- JSON ---------------------------------------------------------------------------------

    def structured(
        self,
        messages: Messages,
        *,
        schema: dict[str, Any],
        name: str,
        max_tokens: int = 512,
        retry: bool = True,
        schema_in_prompt: bool = True,
    ) -> tuple[dict[str, Any], Completion]:
        """A JSON object matching ``schema`` (JSON Schema) as the reply to ``messages``.

        The schema goes to the endpoint as ``response_format`` (OpenAI's ``json_schema`` form,
        else llama.cpp's ``json_object`` + ``schema`` form, else as an instruction in the
        prompt; the accepted form is remembered), and the reply is validated here with
        ``jsonschema``; JSON inside a ```json fence is accepted. ``name`` names the schema
        (letters, digits, ``_``, ``-``). An unparseable or invalid reply is retried once, with
        the problem pointed out (not with ``retry=False``, for a caller that reads a broken
        reply itself); then ``LLMBadOutput``, carrying the last reply in ``reply``.
        ``schema_in_prompt=False`` leaves the schema out of the prompt where the endpoint takes it
        as ``response_format`` (llama.cpp turns it into a grammar; spelled out, a schema with
        descriptions costs hundreds of prompt tokens), for a caller whose messages show the
        reply's shape already; the schema is still spelled out when only the prompt can carry it.
        Returns ``(value, completion)``;
        ``completion.usage`` counts both calls when there were two. ``ValueError`` if
        ``schema`` is not a valid JSON Schema.
        """
        with ObservedCall(self, "structured", max_tokens=max_tokens, output="json") as call:
            value, completion = self._json_call(
                messages,
                schema=schema,
                name=name,
                description="",
                max_tokens=max_tokens,
                tool=False,
                attempts=1 + retry,
                schema_in_prompt=schema_in_prompt,
            )
            return value, call.completed(completion)

    def tool_call(
        self, messages: Messages, *, name: str, description: str, parameters: dict[str, Any], max_tokens: int = 256
    ) -> tuple[dict[str, Any], Completion]:
        """Force a call of function ``name`` and return its arguments, checked against ``parameters``.

        Sends ``tools`` with one function (``description``, JSON Schema ``parameters``) and a
        ``tool_choice`` naming it. Arguments are read from the reply's ``tool_calls``, or parsed
        from its text when the endpoint answers with content instead; an endpoint that rejects
        ``tools`` gets the ``structured()`` request instead. Invalid arguments are retried once,
        then ``LLMBadOutput``. Returns ``(arguments, completion)`` (``completion.text`` is the
        raw arguments JSON). ``ValueError`` if ``parameters`` is not a valid JSON Schema.
        """
        with ObservedCall(self, "tool_call", max_tokens=max_tokens, output="json") as call:
            value, completion = self._json_call(
                messages, schema=parameters, name=name, description=description, max_tokens=max_tokens, tool=True
            )
            return value, call.completed(completion)

    # --- Fan-out ------------------------------------------------------------------------------

    def map(
        self, fn: Callable[[Any], T], items: Iterable[Any], *, concurrency: int | None = None
    ) -> list[T | Exception]:
        """``[fn(item) for item in items]`` run in a thread pool, results in ``items``' order.

        At most ``concurrency`` (default: the client's) calls run at once; the client's own
        requests never exceed its ``concurrency`` either. A call that raised leaves its
        exception object in its slot instead of a result; nothing is raised. Database
        connections opened by ``fn`` in the worker threads are closed when it returns. Each call
        runs in a copy of the caller's context, so its spans are children of the caller's span.
        """
        items = list(items)
        if not items:
            return []
        workers = min(max(1, concurrency or self.concurrency), len(items))

        def run(item: Any) -> T:
            from django.db import connections

            try:
                return fn(item)
            finally:
                connections.close_all()

        with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="llm-map") as pool:
            futures = [pool.submit(contextvars.copy_context().run, run, item) for item in items]
        results: list[T | Exception] = []
        for future in futures:
            error = future.exception()
            results.append(error if error is not None else future.result())
        return results

    def _json_call(
        self,
        messages: Messages,
        *,
        schema: dict[str, Any],
        name: str,
        description: str,
        max_tokens: int,
        tool: bool,
        attempts: int = 2,
        schema_in_prompt: bool = True,
    ) -> tuple[dict[str, Any], Completion]:
        """Request JSON (as a tool call or a response format), validate, retry once with feedback."""
        validator = schema_validator(schema)
        started = time.perf_counter()
        total = Usage()
        attempt_messages = messages
        problem = ""
        use_tool = tool
        for _ in range(attempts):
            if use_tool and self._tools_supported:
                response, raw, sent = self._tool_request(
                    attempt_messages, name=name, description=description, parameters=schema, max_tokens=max_tokens
                )
            else:
                response, raw, sent = self._format_request(
                    attempt_messages,
                    schema=schema,
                    name=name,
                    max_tokens=max_tokens,
                    schema_in_prompt=schema_in_prompt,
                )
            total.add(self._usage(response, sent, raw))
            try:
                value = parse_json_object(raw)
                error = best_match(validator.iter_errors(value))
                if error is not None:
                    where = "/".join(str(p) for p in error.absolute_path)
                    raise ValueError(f"{where + ': ' if where else ''}{error.message}"[:300])
            except ValueError as exc:
                problem = str(exc)
                # Retry through a response format, with the schema in the prompt: an endpoint
                # whose chat format ignores tools (llama.cpp's gemma) fills arguments blindly.
                use_tool = False
                attempt_messages = [
                    *messages,
                    # Show the model its reply only when it was JSON that broke the schema:
                    # garbage (e.g. a truncated, looping string) would only be copied again.
                    *([{"role": "assistant", "content": raw}] if raw.strip() and problem != "not JSON" else []),
                    {
                        "role": "user",
                        "content": f"That reply was not valid ({problem}). Reply again with only a JSON object "
                        f"that matches this JSON schema:\n{json.dumps(schema)}",
                    },
                ]
                continue
            completion = Completion(
                text=raw, usage=total, ms=ms_since(started), model=response_model(response, self.model)
            )
            return value, completion
        error = LLMBadOutput(f"The LLM did not return valid {name} JSON ({problem}).", usage=total)
        error.reply = raw[:2000]  # what the model said, for the trace
        raise error

    def _tool_request(
        self, messages: Messages, *, name: str, description: str, parameters: dict[str, Any], max_tokens: int
    ) -> tuple[Any, str, Messages]:
        """Force function ``name``; returns (response, raw arguments text, messages sent)."""
        function = {"name": schema_name(name), "description": description, "parameters": parameters}
        try:
            response = self._create(
                messages=messages,
                max_tokens=max_tokens,
                temperature=0.0,
                tools=[{"type": "function", "function": function}],
                tool_choice={"type": "function", "function": {"name": function["name"]}},
            )
        except LLMHTTPError as exc:
            if not exc.rejected:
                raise
            if "tool" in str(exc).lower():
                self._tools_supported = False  # the endpoint rejects tools: use a response format
            return self._format_request(messages, schema=parameters, name=name, max_tokens=max_tokens)
        for call in tool_calls(response):
            function_call = getattr(call, "function", None)
            if function_call is not None and getattr(function_call, "name", None) in (function["name"], None):
                arguments = function_call.arguments
                return response, arguments if isinstance(arguments, str) else json.dumps(arguments), messages
        content = message_content(response)
        try:
            parse_json_object(content)
        except ValueError:
            # The endpoint ignored the forced tool (e.g. llama.cpp with a chat format without
            # tool support) and wrote prose: ask through a response format from now on.
            self._tools_supported = False
            return self._format_request(messages, schema=parameters, name=name, max_tokens=max_tokens)
        return response, content, messages

    def _format_request(
        self, messages: Messages, *, schema: dict[str, Any], name: str, max_tokens: int, schema_in_prompt: bool = True
    ) -> tuple[Any, str, Messages]:
        """Ask for JSON via ``response_format``, trying the forms the endpoint may accept."""
        modes = [self._json_mode] if self._json_mode else list(JSON_MODES)
        for mode in modes:
            carried = mode == "json_schema" or (mode == "json_object" and not schema_in_prompt)
            sent = messages if carried else with_schema_instruction(messages, schema)
            try:
                response = self._create(
                    messages=sent, max_tokens=max_tokens, temperature=0.0, **JSON_MODES[mode](schema, name)
                )
            except LLMHTTPError as exc:
                if exc.rejected and mode != modes[-1]:
                    continue  # this form of response_format is not accepted here: try the next
                raise
            self._json_mode = mode
            return response, message_content(response), sent
        raise AssertionError("unreachable")


# --- Configured client and compatibility ------------------------------------------------------

_instances: dict[tuple[type, str, str, str], LLMClient] = {}
_instances_lock = threading.Lock()


def _configured(cls: type[LLMClient]) -> LLMClient | None:
    model = settings.KB_LLM_MODEL
    if not model:
        return None
    key = (cls, model, settings.OPENAI_BASE_URL or DEFAULT_BASE_URL, settings.OPENAI_API_KEY)
    with _instances_lock:
        client = _instances.get(key)
        if client is None:
            client = _instances[key] = cls(model)
        return client


def configured_llm() -> LLMClient | None:
    """The client of ``KB_LLM_MODEL`` at ``OPENAI_BASE_URL``, or ``None`` when no model is set.

    One instance per model and endpoint is kept, so its HTTP connections are reused.
    """
    return _configured(LLMClient)
