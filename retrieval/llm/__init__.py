"""LLM access: one client for any OpenAI-compatible chat endpoint.

``LLMClient`` (``chat``, ``structured``, ``tool_call``, ``stream``, ``map``) and
``configured_llm()`` are the interface; errors are in ``retrieval.llm.errors``.
"""

from retrieval.llm.circuit import circuit_reset
from retrieval.llm.client import (
    Completion,
    LLMBadOutput,
    LLMClient,
    LLMEmptyReply,
    LLMError,
    LLMHTTPError,
    LLMTimeout,
    LLMUnavailable,
    configured_llm,
)

__all__ = [
    "Completion",
    "LLMBadOutput",
    "LLMClient",
    "LLMEmptyReply",
    "LLMError",
    "LLMHTTPError",
    "LLMTimeout",
    "LLMUnavailable",
    "circuit_reset",
    "configured_llm",
]
