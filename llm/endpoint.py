"""Requests to one OpenAI-compatible chat endpoint, and ``Completion``, one answered request.

``ChatEndpoint`` (the base of ``llm.client.LLMClient``) sends ``chat.completions.create`` through
``openai.OpenAI`` with a time budget per call (retries included), retries with exponential backoff
and jitter on transient failures (429, 5xx, connection errors, timeouts; ``Retry-After`` honoured
up to ``MAX_RETRY_AFTER_S``), a circuit breaker per endpoint (``llm.circuit``) and a bound on
concurrent requests. Each ``openai`` failure becomes an ``LLMError`` with a short message and no
secrets (``llm_error``); ``usage`` counts a response's tokens and cost in USD.
"""

from __future__ import annotations

import random
import re
import threading
import time
from dataclasses import dataclass
from email.utils import parsedate_to_datetime
from typing import Any
from urllib.parse import urlsplit

import openai
import tenacity
from django.conf import settings

from llm.circuit import circuit_for
from llm.errors import LLMBadOutput, LLMError, LLMHTTPError, LLMTimeout, LLMUnavailable
from llm.tokenizer import count_tokens
from llm.usage import Usage

DEFAULT_BASE_URL = "https://api.openai.com/v1"
# A 429 asking us to wait longer than this is not retried: the caller should degrade instead.
MAX_RETRY_AFTER_S = 30.0
MAX_BACKOFF_S = 30.0

Messages = list[dict[str, Any]]

_SECRET = re.compile(r"\b(sk-|key-|Bearer\s+)[A-Za-z0-9_\-.*]{6,}")
# pydantic's message for a request body that failed validation (llama-cpp-python sends it as a 500).
_VALIDATION_ERROR = re.compile(r"\bvalidation errors? for\b|\b\d+ validation errors?\b")


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


class ChatEndpoint:
    """One model at one OpenAI-compatible endpoint: its settings, requests and cost. Thread-safe.

    The constructor's arguments are ``LLMClient``'s (which see). ``_create`` is the one place a
    request leaves; what the endpoint turned out to accept (``response_format`` form, tools,
    usage in streams, ``max_tokens``' name) is remembered on the instance.
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

    @property
    def endpoint_key(self) -> str:
        """The circuit breaker's key: base URL and model."""
        return f"{self.base_url} {self.model}"

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
        model = response_model(response, self.model)
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
                f"The LLM endpoint {host(self.base_url)} keeps failing; "
                f"not calling it for {breaker.seconds_until_trial():.0f} s."
            )
        failed = False
        request = {k: v for k, v in params.items() if k != "_deadline"}
        request["timeout"] = max(0.2, params["_deadline"] - time.monotonic())
        try:
            with self._slots:
                return self._openai.chat.completions.create(model=self.model, **request)
        except openai.APIError as exc:
            error = llm_error(exc, self)
            failed = error.retryable
            raise error from exc
        except ValueError as exc:  # a 200 whose body is not JSON (the client's parser raises)
            raise LLMBadOutput(f"The LLM endpoint {host(self.base_url)} sent a response that is not JSON.") from exc
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


# --- Reading responses and errors -------------------------------------------------------------


def message_content(response: Any) -> str:
    """The reply's text (``""`` when it has none); ``LLMBadOutput`` for an unreadable response."""
    content = getattr(_message(response), "content", None)
    return content if isinstance(content, str) else ""


def tool_calls(response: Any) -> list[Any]:
    """The reply's ``tool_calls`` (empty when it has none)."""
    return list(getattr(_message(response), "tool_calls", None) or [])


def response_model(response: Any, default: str) -> str:
    """The model name the endpoint reported, else ``default``."""
    model = getattr(response, "model", None)
    return model if isinstance(model, str) and model else default


def _message(response: Any) -> Any:
    choices = getattr(response, "choices", None)
    if isinstance(response, str) or not choices:
        raise LLMBadOutput("The LLM endpoint returned an unreadable response.")
    return choices[0].message


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


def ms_since(started: float) -> float:
    """Milliseconds since ``started`` (a ``time.perf_counter()`` reading)."""
    return (time.perf_counter() - started) * 1000


def host(url: str) -> str:
    """``url``'s host (and port), as error messages name the endpoint."""
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


def llm_error(error: openai.APIError, endpoint: ChatEndpoint) -> LLMError:
    """The ``LLMError`` for an ``openai`` exception, with a short message and no secrets."""
    where = host(endpoint.base_url)
    if isinstance(error, openai.APITimeoutError):
        return LLMTimeout(f"The LLM endpoint {where} did not answer within {endpoint.timeout_s:g} s.")
    if isinstance(error, openai.APIConnectionError):
        return LLMUnavailable(f"Could not connect to the LLM endpoint {where}.", retryable=True)
    if isinstance(error, openai.APIStatusError):
        detail = _error_detail(error)
        return LLMHTTPError(
            f"The LLM endpoint {where} answered HTTP {error.status_code}" + (f": {detail[:200]}" if detail else "."),
            http_status=error.status_code,
            retry_after_s=_retry_after_s(getattr(error.response, "headers", None)),
            rejected=bool(_VALIDATION_ERROR.search(detail)),
        )
    return LLMBadOutput(f"The LLM endpoint {where} returned an unreadable response.")


def _error_detail(error: openai.APIStatusError) -> str:
    body = error.body
    if isinstance(body, dict):
        body = body.get("error", body)
        body = body.get("message") or body.get("detail") or "" if isinstance(body, dict) else body
    text = " ".join(str(body or "").split())
    return _SECRET.sub(r"\1***", text)
