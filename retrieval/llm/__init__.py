"""LLM access: one client for any OpenAI-compatible chat endpoint.

``LLMClient`` (``chat``, ``structured``, ``tool_call``, ``stream``, ``map``) and
``configured_llm()`` are the interface; ``ChatModel``, ``OpenAIChatModel`` and
``configured_chat_model()`` are the older one, kept until every caller has moved.
"""

from retrieval.llm.circuit import circuit_reset
from retrieval.llm.client import (
    ChatModel,
    Completion,
    LLMBadOutput,
    LLMClient,
    LLMEmptyReply,
    LLMError,
    LLMHTTPError,
    LLMTimeout,
    LLMUnavailable,
    OpenAIChatModel,
    configured_chat_model,
    configured_llm,
)

__all__ = [
    "ChatModel",
    "Completion",
    "LLMBadOutput",
    "LLMClient",
    "LLMEmptyReply",
    "LLMError",
    "LLMHTTPError",
    "LLMTimeout",
    "LLMUnavailable",
    "OpenAIChatModel",
    "circuit_reset",
    "configured_chat_model",
    "configured_llm",
]
