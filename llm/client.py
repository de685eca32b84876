"""One client for any OpenAI-compatible chat endpoint (OpenAI, Azure, vLLM, Ollama, llama.cpp).

``LLMClient`` wraps ``openai.OpenAI`` with what production calls need: a timeout per request,
retries with exponential backoff on transient failures (429, 5xx, connection errors,
timeouts; ``Retry-After`` honoured), a circuit breaker per endpoint, a bound on concurrent
requests, token usage and cost per call, and JSON output checked against a JSON schema on our
side. Every failure is an ``LLMError`` (a ``core.errors.UpstreamError``) with a short message.

Every public call made inside ``llm.metering.llm_metered`` counts against that tenant's daily LLM
tokens: it is refused before any request (``LLMQuotaExceeded``) once they are used up, and its
tokens are recorded after it (``_Call``).
"""

from __future__ import annotations

import contextvars
import json
import random
import re
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import closing
from dataclasses import dataclass
from email.utils import parsedate_to_datetime
from typing import Any, TypeVar
from urllib.parse import urlsplit

import openai
import tenacity
from django.conf import settings
from jsonschema import SchemaError
from jsonschema.exceptions import best_match
from jsonschema.validators import validator_for

from core import metrics, telemetry
from llm.circuit import circuit_for
from llm.errors import (
    LLMBadOutput,
    LLMEmptyReply,
    LLMError,
    LLMHTTPError,
    LLMTimeout,
    LLMUnavailable,
)
from llm.metering import llm_meter_current
from llm.tokenizer import count_tokens
from llm.usage import Usage

DEFAULT_BASE_URL = "https://api.openai.com/v1"
# A 429 asking us to wait longer than this is not retried: the caller should degrade instead.
MAX_RETRY_AFTER_S = 30.0
MAX_BACKOFF_S = 30.0

Messages = list[dict[str, Any]]
T = TypeVar("T")


# --- Results ----------------------------------------------------------------------------------


@dataclass
class Completion:
    """One answered request.

    ``text``: the reply (stripped; for ``tool_call`` the raw arguments JSON). ``usage``: calls,
    tokens and cost in USD (for ``structured``/``tool_call`` including a retried call). ``ms``:
    wall time in milliseconds including retries. ``model``: the model name the endpoint reported.
    """

    text: str
    usage: Usage
    ms: float
    model: str


# --- Client -----------------------------------------------------------------------------------


class LLMClient:
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
    by all clients of the same base URL and model; each failed HTTP attempt counts.
    """

    def __init__(
        self,
        model: str,
        *,
        base_url: str | None = None,
        api_key: str | None = None,
        timeout_s: float | None = None,
        retries: int | None = None,
        concurrency: int | None = None,
        prices: dict[str, list[float]] | None = None,
        backoff_s: float = 0.5,
    ):
        self.model = model
        self.base_url = (base_url or settings.OPENAI_BASE_URL or DEFAULT_BASE_URL).rstrip("/")
        self.timeout_s = float(timeout_s if timeout_s is not None else settings.KB_LLM_TIMEOUT_S)
        self.retries = max(0, retries if retries is not None else settings.KB_LLM_RETRIES)
        self.concurrency = max(1, concurrency or settings.KB_LLM_CONCURRENCY)
        self.prices = dict(prices if prices is not None else settings.KB_LLM_PRICES)
        self.backoff_s = backoff_s
        self.circuit_failures = settings.KB_LLM_CIRCUIT_FAILURES
        self.circuit_cooldown_s = float(settings.KB_LLM_CIRCUIT_COOLDOWN_S)
        self._openai = openai.OpenAI(
            api_key=api_key or settings.OPENAI_API_KEY or "not-needed",
            base_url=self.base_url,
            timeout=self.timeout_s,
            max_retries=0,  # retries are ours (tenacity), so the circuit breaker sees each attempt
        )
        self._slots = threading.BoundedSemaphore(self.concurrency)
        self._local = threading.local()
        # What the endpoint accepts, learned from its first answers (None = not known yet).
        self._json_mode: str | None = None
        self._tools_supported = True
        self._stream_usage_supported = True
        self._max_tokens_param = "max_tokens"

    @property
    def name(self) -> str:
        """The model name (as traces and step summaries show it)."""
        return self.model

    def __repr__(self) -> str:
        return f"LLMClient(model={self.model!r}, base_url={self.base_url!r})"

    @property
    def endpoint_key(self) -> str:
        """The circuit breaker's key: base URL and model."""
        return f"{self.base_url} {self.model}"

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
        with _Call(self, "chat", max_tokens=max_tokens, temperature=temperature) as call:
            return call.completed(self._chat(messages, max_tokens=max_tokens, temperature=temperature))

    def _chat(self, messages: Messages, *, max_tokens: int, temperature: float) -> Completion:
        started = time.perf_counter()
        response = self._create(messages=messages, max_tokens=max_tokens, temperature=temperature)
        text = _message_content(response).strip()
        usage = self._usage(response, messages, text)
        if not text:
            raise LLMEmptyReply("The LLM returned an empty reply.", usage=usage)
        return Completion(text=text, usage=usage, ms=_ms_since(started), model=_response_model(response, self.model))

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
            _Call(self, "stream", max_tokens=max_tokens, temperature=0.0, output=output) as call,
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
            _validator(schema)
            modes = [self._json_mode] if self._json_mode else list(_JSON_MODES)
            for mode in modes:
                sent = messages if mode == "json_schema" else _with_schema_instruction(messages, schema)
                try:
                    chunks = self._stream_open({**params, "messages": sent, **_JSON_MODES[mode](schema, name)})
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
            raise _mapped(exc, self) from exc
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
        with _Call(self, "structured", max_tokens=max_tokens, output="json") as call:
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
        with _Call(self, "tool_call", max_tokens=max_tokens, output="json") as call:
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

    # --- Usage and cost -----------------------------------------------------------------------

    def cost_usd(self, tokens_in: int, tokens_out: int, *, model: str | None = None) -> float:
        """Cost in US dollars of ``tokens_in`` prompt and ``tokens_out`` completion tokens.

        Prices come from ``prices`` by ``model`` (default this client's model); a model
        without a price costs 0.0 (e.g. a local model).
        """
        price = self.prices.get(model or self.model) or self.prices.get(self.model)
        if not price:
            return 0.0
        return (tokens_in * price[0] + tokens_out * price[1]) / 1_000_000

    def _usage(self, response: Any, messages: Messages, text: str) -> Usage:
        """One call's usage: the endpoint's token counts when it sent them, else tiktoken's."""
        reported = getattr(response, "usage", None)
        tokens_in = getattr(reported, "prompt_tokens", None)
        tokens_out = getattr(reported, "completion_tokens", None)
        if tokens_in is None or tokens_out is None:
            tokens_in, tokens_out = prompt_tokens(messages), count_tokens(text)
        model = _response_model(response, self.model)
        return Usage(
            llm_calls=1,
            tokens_in=tokens_in,
            tokens_out=tokens_out,
            cost_usd=self.cost_usd(tokens_in, tokens_out, model=model),
        )

    # --- Requests -----------------------------------------------------------------------------

    def _create(self, **params: Any) -> Any:
        """``chat.completions.create`` with retries, backoff, circuit breaker and concurrency bound."""
        if "max_tokens" in params and self._max_tokens_param != "max_tokens":
            params[self._max_tokens_param] = params.pop("max_tokens")
        # ``timeout_s`` is the budget of the whole call, retries included: no retry starts once
        # it is spent, and each attempt may only use what is left of it.
        deadline = time.monotonic() + self.timeout_s
        params = {**params, "_deadline": deadline}
        retrying = tenacity.Retrying(
            stop=tenacity.stop_after_attempt(self.retries + 1) | tenacity.stop_after_delay(self.timeout_s),
            wait=self._backoff,
            retry=tenacity.retry_if_exception(_worth_retrying),
            reraise=True,
        )
        try:
            return retrying(self._attempt, params)
        except LLMHTTPError as exc:
            # Newer OpenAI models take max_completion_tokens and reject max_tokens.
            if exc.http_status == 400 and "max_completion_tokens" in str(exc) and "max_tokens" in params:
                self._max_tokens_param = "max_completion_tokens"
                params["max_completion_tokens"] = params.pop("max_tokens")
                return retrying(self._attempt, params)
            raise

    def _attempt(self, params: dict[str, Any]) -> Any:
        """One HTTP request, unless the circuit is open; the breaker learns its outcome."""
        breaker = circuit_for(self.endpoint_key, failures=self.circuit_failures, cooldown_s=self.circuit_cooldown_s)
        if not breaker.allow():
            raise LLMUnavailable(
                f"The LLM endpoint {_host(self.base_url)} keeps failing; "
                f"not calling it for {breaker.seconds_until_trial():.0f} s."
            )
        failed = False
        request = {k: v for k, v in params.items() if k != "_deadline"}
        request["timeout"] = max(0.2, params["_deadline"] - time.monotonic())
        try:
            with self._slots:
                return self._openai.chat.completions.create(model=self.model, **request)
        except openai.APIError as exc:
            error = _mapped(exc, self)
            failed = error.retryable
            raise error from exc
        except ValueError as exc:  # a 200 whose body is not JSON (the client's parser raises)
            raise LLMBadOutput(f"The LLM endpoint {_host(self.base_url)} sent a response that is not JSON.") from exc
        finally:
            if failed:
                breaker.record_failure()
            else:
                breaker.record_success()

    def _backoff(self, retry_state: tenacity.RetryCallState) -> float:
        """Seconds before the next attempt: exponential with jitter, at least ``Retry-After``."""
        delay = self.backoff_s * 2 ** (retry_state.attempt_number - 1) * random.uniform(0.75, 1.25)
        error = retry_state.outcome.exception() if retry_state.outcome else None
        retry_after = getattr(error, "retry_after_s", None)
        if retry_after is not None:
            delay = max(delay, retry_after)
        return min(delay, MAX_BACKOFF_S)

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
        validator = _validator(schema)
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
                value = _parse_json_object(raw)
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
                text=raw, usage=total, ms=_ms_since(started), model=_response_model(response, self.model)
            )
            return value, completion
        error = LLMBadOutput(f"The LLM did not return valid {name} JSON ({problem}).", usage=total)
        error.reply = raw[:2000]  # what the model said, for the trace
        raise error

    def _tool_request(
        self, messages: Messages, *, name: str, description: str, parameters: dict[str, Any], max_tokens: int
    ) -> tuple[Any, str, Messages]:
        """Force function ``name``; returns (response, raw arguments text, messages sent)."""
        function = {"name": _schema_name(name), "description": description, "parameters": parameters}
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
        for call in _tool_calls(response):
            function_call = getattr(call, "function", None)
            if function_call is not None and getattr(function_call, "name", None) in (function["name"], None):
                arguments = function_call.arguments
                return response, arguments if isinstance(arguments, str) else json.dumps(arguments), messages
        content = _message_content(response)
        try:
            _parse_json_object(content)
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
        modes = [self._json_mode] if self._json_mode else list(_JSON_MODES)
        for mode in modes:
            carried = mode == "json_schema" or (mode == "json_object" and not schema_in_prompt)
            sent = messages if carried else _with_schema_instruction(messages, schema)
            try:
                response = self._create(
                    messages=sent, max_tokens=max_tokens, temperature=0.0, **_JSON_MODES[mode](schema, name)
                )
            except LLMHTTPError as exc:
                if exc.rejected and mode != modes[-1]:
                    continue  # this form of response_format is not accepted here: try the next
                raise
            self._json_mode = mode
            return response, _message_content(response), sent
        raise AssertionError("unreachable")


# --- Observation ------------------------------------------------------------------------------


class _Call:
    """One public call's quota, span and metrics: ``with _Call(client, operation, ...) as call:``.

    The tenant's meter bound to the code path (``llm.metering``), if any, checks the daily LLM
    tokens before the call (``LLMQuotaExceeded``: nothing is sent) and records the call's tokens
    after it, a failed call's included.

    The span follows OpenTelemetry's GenAI semantic conventions (``chat <model>``, kind client:
    ``gen_ai.system``, ``gen_ai.request.model``, ``gen_ai.usage.input_tokens`` and
    ``output_tokens``, ``gen_ai.response.time_to_first_chunk`` in seconds for a stream) and never
    holds the prompt or the reply. Its metrics go to ``core.metrics.llm_call_observe``. The body
    hands its ``Completion`` to ``completed`` (or sets ``usage``); a failure's usage is read
    from the ``LLMError``.
    """

    def __init__(
        self, client: LLMClient, operation: str, *, max_tokens: int, temperature: float = 0.0, output: str = "json"
    ):
        self.client = client
        self.operation = operation
        self.request = (max_tokens, temperature, output)
        self.usage: Usage | None = None
        self.model = ""
        self.first_token_s: float | None = None
        self.span = None
        self.meter = llm_meter_current()

    def __enter__(self) -> _Call:
        if self.meter is not None:
            self.meter.check()  # LLMQuotaExceeded: the tenant's tokens are used up, nothing is sent
        self.started = time.perf_counter()
        if telemetry.telemetry_enabled():
            max_tokens, temperature, output = self.request
            endpoint = urlsplit(self.client.base_url)
            attributes = {
                "gen_ai.operation.name": "chat",
                "gen_ai.system": "openai",
                "gen_ai.provider.name": "openai",
                "gen_ai.request.model": self.client.model,
                "gen_ai.request.max_tokens": max_tokens,
                "gen_ai.request.temperature": temperature,
                "gen_ai.output.type": output,
                "server.address": endpoint.hostname,
                "server.port": endpoint.port,
                "kb.llm.operation": self.operation,
            }
            self.span = telemetry.span_start(f"chat {self.client.model}", kind="client", attributes=attributes)
        return self

    def completed(self, completion: Completion) -> Completion:
        self.usage, self.model = completion.usage, completion.model
        return completion

    def piece(self) -> None:
        """A streamed piece of text arrived (the first one times the first token)."""
        if self.first_token_s is None:
            self.first_token_s = time.perf_counter() - self.started

    def __exit__(self, exc_type, exc, tb) -> bool:
        seconds = time.perf_counter() - self.started
        abandoned = isinstance(exc, GeneratorExit)  # the caller stopped reading a stream
        failed = exc is not None and not abandoned
        usage = (getattr(exc, "usage", None) if failed else None) or self.usage or Usage()
        error = _error_kind(exc) if failed else None
        if self.meter is not None and (usage.tokens_in or usage.tokens_out):
            self.meter.record(usage)
        metrics.llm_call_observe(
            model=self.client.model,
            operation=self.operation,
            seconds=seconds,
            tokens_in=usage.tokens_in,
            tokens_out=usage.tokens_out,
            cost_usd=usage.cost_usd,
            error=error,
            first_token_s=self.first_token_s,
        )
        if self.span is not None:
            attributes = {
                "gen_ai.response.model": self.model or None,
                "gen_ai.usage.input_tokens": usage.tokens_in,
                "gen_ai.usage.output_tokens": usage.tokens_out,
                "gen_ai.response.time_to_first_chunk": self.first_token_s,
                "kb.llm.cost_usd": usage.cost_usd,
                "kb.llm.abandoned": abandoned or None,
                "http.response.status_code": getattr(exc, "http_status", None) if failed else None,
            }
            self.span.set_attributes(telemetry.attributes_clean(attributes) or {})
            if failed:
                detail = str(exc)[:300] if telemetry.capture_text() else error
                telemetry.span_fail(self.span, detail, error_type=type(exc).__name__)
            self.span.end()
        return False


def _error_kind(error: BaseException) -> str:
    """A failed call's short kind, for metrics: timeout, unavailable, http_error, bad_output, ..."""
    kinds = {
        LLMTimeout: "timeout",
        LLMUnavailable: "unavailable",
        LLMHTTPError: "http_error",
        LLMEmptyReply: "empty_reply",
        LLMBadOutput: "bad_output",
    }
    return next((kind for cls, kind in kinds.items() if isinstance(error, cls)), type(error).__name__)


# --- Helpers ----------------------------------------------------------------------------------

_FENCE = re.compile(r"```(?:json|JSON)?\s*(.*?)```", re.DOTALL)
_SECRET = re.compile(r"\b(sk-|key-|Bearer\s+)[A-Za-z0-9_\-.*]{6,}")
_NAME = re.compile(r"[^A-Za-z0-9_-]")
# pydantic's message for a request body that failed validation (llama-cpp-python sends it as a 500).
_VALIDATION_ERROR = re.compile(r"\bvalidation errors? for\b|\b\d+ validation errors?\b")


def _schema_name(name: str) -> str:
    return _NAME.sub("_", name)[:64] or "output"


def _strict_compatible(schema: Any) -> bool:
    """Whether OpenAI's strict mode accepts ``schema``: closed objects, every property required."""
    if isinstance(schema, dict):
        if schema.get("type") == "object" and "properties" in schema:
            properties = schema["properties"]
            if schema.get("additionalProperties") is not False or set(schema.get("required", [])) != set(properties):
                return False
        return all(_strict_compatible(value) for value in schema.values())
    if isinstance(schema, list):
        return all(_strict_compatible(value) for value in schema)
    return True


# The response_format forms, in the order tried: OpenAI's; llama.cpp's; none (schema in the prompt).
_JSON_MODES: dict[str, Callable[[dict[str, Any], str], dict[str, Any]]] = {
    "json_schema": lambda schema, name: {
        "response_format": {
            "type": "json_schema",
            "json_schema": {"name": _schema_name(name), "schema": schema, "strict": _strict_compatible(schema)},
        }
    },
    "json_object": lambda schema, name: {"response_format": {"type": "json_object", "schema": schema}},
    "prompt": lambda schema, name: {},
}


def _with_schema_instruction(messages: Messages, schema: dict[str, Any]) -> Messages:
    """``messages`` with the JSON schema spelled out at the end of the last user turn."""
    instruction = f"Reply with only a JSON object that matches this JSON schema:\n{json.dumps(schema)}"
    if messages and messages[-1].get("role") == "user" and isinstance(messages[-1].get("content"), str):
        last = messages[-1]
        return [*messages[:-1], {**last, "content": f"{last['content']}\n\n{instruction}"}]
    return [*messages, {"role": "user", "content": instruction}]


def _validator(schema: dict[str, Any]) -> Any:
    cls = validator_for(schema)
    try:
        cls.check_schema(schema)
    except SchemaError as exc:
        raise ValueError(f"Invalid JSON schema: {exc.message}") from exc
    return cls(schema)


def _parse_json_object(text: str) -> dict[str, Any]:
    """The JSON object in ``text``: bare, in a ```json fence, or between the outer braces."""
    text = (text or "").strip()
    if not text:
        raise ValueError("empty reply")
    candidates = [text]
    fenced = _FENCE.search(text)
    if fenced:
        candidates.append(fenced.group(1).strip())
    first, last = text.find("{"), text.rfind("}")
    if 0 <= first < last:
        candidates.append(text[first : last + 1])
    for candidate in candidates:
        try:
            value = json.loads(candidate)
        except ValueError:
            continue
        if isinstance(value, dict):
            return value
        raise ValueError(f"expected a JSON object, got {type(value).__name__}")
    raise ValueError("not JSON")


def _message(response: Any) -> Any:
    choices = getattr(response, "choices", None)
    if isinstance(response, str) or not choices:
        raise LLMBadOutput("The LLM endpoint returned an unreadable response.")
    return choices[0].message


def _message_content(response: Any) -> str:
    content = getattr(_message(response), "content", None)
    return content if isinstance(content, str) else ""


def _tool_calls(response: Any) -> list[Any]:
    return list(getattr(_message(response), "tool_calls", None) or [])


def _response_model(response: Any, default: str) -> str:
    model = getattr(response, "model", None)
    return model if isinstance(model, str) and model else default


def prompt_tokens(messages: Messages) -> int:
    """Approximate prompt tokens of ``messages`` (cl100k): content plus 3 per message and 3 more.

    Used when an endpoint does not report usage; text parts of multi-part contents count.
    """
    total = 3
    for message in messages:
        content = message.get("content") or ""
        if isinstance(content, list):
            content = " ".join(part.get("text", "") for part in content if isinstance(part, dict))
        total += 3 + count_tokens(str(content))
    return total


def _ms_since(started: float) -> float:
    return (time.perf_counter() - started) * 1000


def _host(url: str) -> str:
    parts = urlsplit(url)
    return parts.hostname + (f":{parts.port}" if parts.port else "") if parts.hostname else "(unknown)"


def _worth_retrying(error: BaseException) -> bool:
    if not isinstance(error, LLMError) or not error.retryable:
        return False
    retry_after = getattr(error, "retry_after_s", None)
    return retry_after is None or retry_after <= MAX_RETRY_AFTER_S


def _retry_after_s(headers: Any) -> float | None:
    """The ``Retry-After`` (or ``retry-after-ms``) header in seconds, ``None`` if absent or bad."""
    if headers is None:
        return None
    value = headers.get("retry-after-ms")
    if value:
        try:
            return max(0.0, float(value) / 1000)
        except ValueError:
            pass
    value = headers.get("retry-after")
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        try:
            return max(0.0, parsedate_to_datetime(value).timestamp() - time.time())
        except (TypeError, ValueError):
            return None


def _mapped(error: openai.APIError, client: LLMClient) -> LLMError:
    """The ``LLMError`` for an ``openai`` exception, with a short message and no secrets."""
    host = _host(client.base_url)
    if isinstance(error, openai.APITimeoutError):
        return LLMTimeout(f"The LLM endpoint {host} did not answer within {client.timeout_s:g} s.")
    if isinstance(error, openai.APIConnectionError):
        return LLMUnavailable(f"Could not connect to the LLM endpoint {host}.", retryable=True)
    if isinstance(error, openai.APIStatusError):
        detail = _error_detail(error)
        return LLMHTTPError(
            f"The LLM endpoint {host} answered HTTP {error.status_code}" + (f": {detail[:200]}" if detail else "."),
            http_status=error.status_code,
            retry_after_s=_retry_after_s(getattr(error.response, "headers", None)),
            rejected=bool(_VALIDATION_ERROR.search(detail)),
        )
    return LLMBadOutput(f"The LLM endpoint {host} returned an unreadable response.")


def _error_detail(error: openai.APIStatusError) -> str:
    body = error.body
    if isinstance(body, dict):
        body = body.get("error", body)
        body = body.get("message") or body.get("detail") or "" if isinstance(body, dict) else body
    text = " ".join(str(body or "").split())
    return _SECRET.sub(r"\1***", text)


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
