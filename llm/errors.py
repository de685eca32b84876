"""The errors of the LLM layer: every failure of an LLM call is an ``LLMError``.

``LLMError`` is a ``core.errors.UpstreamError`` (HTTP 502 in the API) carrying the ``Usage``
the failed call still consumed. Pipelines catch it and degrade (``retrieval.stages.base.LLMStage``: a stage falls back to its LLM-free counterpart).
"""

from __future__ import annotations

from core.errors import UpstreamError
from llm.usage import Usage


class LLMError(UpstreamError):
    """Base of every LLM failure. ``usage`` holds the usage of calls that did get a reply."""

    code = "llm_error"
    status = 502
    retryable = False  # whether another attempt may succeed (transient failure)

    def __init__(self, message: str, *, usage: Usage | None = None):
        super().__init__(message)
        self.usage = usage or Usage()


class LLMTimeout(LLMError):
    """The endpoint did not answer within the timeout (after retries)."""

    code = "llm_timeout"
    status = 504
    retryable = True


class LLMUnavailable(LLMError):
    """The endpoint cannot be reached: connection refused or reset, or its circuit is open."""

    code = "llm_unavailable"
    status = 503

    def __init__(self, message: str, *, retryable: bool = False, usage: Usage | None = None):
        super().__init__(message, usage=usage)
        self.retryable = retryable


class LLMBadOutput(LLMError):
    """The reply was unreadable, or not JSON matching the requested schema (after one retry)."""

    code = "llm_bad_output"


class LLMEmptyReply(LLMError):
    """The model answered with empty or whitespace-only text."""

    code = "llm_empty_reply"


class LLMHTTPError(LLMError):
    """The endpoint answered with an HTTP error. ``http_status`` is its status code.

    429 and 5xx are retried before this is raised; ``retry_after_s`` is the endpoint's
    ``Retry-After`` in seconds, when it sent one. ``rejected`` is true when the endpoint
    refused the request itself (400, 422, or a 5xx reporting a request validation error, which
    is how llama-cpp-python's server answers unknown parameter values); that is not retried.
    """

    code = "llm_http_error"

    def __init__(self, message: str, *, http_status: int, retry_after_s: float | None = None, rejected: bool = False):
        super().__init__(message)
        self.http_status = http_status
        self.retry_after_s = retry_after_s
        self.rejected = rejected or http_status in (400, 422)
        self.retryable = not self.rejected and (http_status == 429 or http_status >= 500)
