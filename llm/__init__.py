"""LLM access: one client for any OpenAI-compatible chat endpoint, below every app but ``core``.

``LLMClient`` (``chat``, ``structured``, ``tool_call``, ``stream``, ``map``) and
``configured_llm()`` are the interface; errors are in ``llm.errors``; ``Usage`` counts calls,
tokens and cost; ``llm_metered`` binds a tenant's daily LLM tokens to a code path, so every call
made in it is checked and counted (``llm.metering``). ``llm.tokenizer`` counts tokens offline;
``llm.local`` serves a bundled model by alias, Gemma 3 270M or Qwen2.5-Coder-1.5B (``manage.py
localllm``, and the tests' local LLMs). Imports only ``core`` and third-party code.
"""

from llm.circuit import circuit_reset
from llm.client import (
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
from llm.metering import LLMQuotaExceeded, llm_metered
from llm.usage import Usage

__all__ = [
    "Completion",
    "LLMBadOutput",
    "LLMClient",
    "LLMEmptyReply",
    "LLMError",
    "LLMHTTPError",
    "LLMQuotaExceeded",
    "LLMTimeout",
    "LLMUnavailable",
    "Usage",
    "circuit_reset",
    "configured_llm",
    "llm_metered",
]
