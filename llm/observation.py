"""What every public LLM call leaves behind: the tenant's quota checked and counted, a span and metrics.

``ObservedCall`` wraps one ``LLMClient`` call; the client never sends a request outside one.
"""

from __future__ import annotations

import time
from urllib.parse import urlsplit

from core import metrics, telemetry
from llm.endpoint import ChatEndpoint, Completion
from llm.errors import LLMBadOutput, LLMEmptyReply, LLMHTTPError, LLMTimeout, LLMUnavailable
from llm.metering import llm_meter_current
from llm.usage import Usage


class ObservedCall:
    """One public call's quota, span and metrics: ``with ObservedCall(client, operation, ...) as call:``.

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
        self, client: ChatEndpoint, operation: str, *, max_tokens: int, temperature: float = 0.0, output: str = "json"
    ):
        self.client = client
        self.operation = operation
        self.request = (max_tokens, temperature, output)
        self.usage: Usage | None = None
        self.model = ""
        self.first_token_s: float | None = None
        self.span = None
        self.meter = llm_meter_current()

    def __enter__(self) -> ObservedCall:
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
        """Record ``completion``'s usage and model for the span and metrics; returns it."""
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
