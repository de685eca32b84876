"""The chat model behind LLM answers: any OpenAI-compatible endpoint (OpenAI, Azure, vLLM,
Ollama, llama.cpp). Configured by ``KB_LLM_MODEL``, ``OPENAI_BASE_URL`` and ``OPENAI_API_KEY``.
"""

from __future__ import annotations

from typing import Protocol

from django.conf import settings

from knowledge.errors import UpstreamError


class ChatModel(Protocol):
    name: str

    def complete(self, messages: list[dict[str, str]], *, max_tokens: int = 512) -> str:
        """Return the assistant's reply text for ``messages`` (OpenAI chat format)."""


class OpenAIChatModel:
    """Chat completions from an OpenAI-compatible endpoint; ``UpstreamError`` on failure."""

    def __init__(self, model: str, *, base_url: str | None = None, api_key: str | None = None):
        from openai import OpenAI

        self.name = model
        self.client = OpenAI(
            api_key=api_key or settings.OPENAI_API_KEY or "not-needed",
            base_url=base_url or settings.OPENAI_BASE_URL or None,
            timeout=settings.KB_LLM_TIMEOUT_S,
            max_retries=2,
        )

    def complete(self, messages: list[dict[str, str]], *, max_tokens: int = 512) -> str:
        from openai import OpenAIError

        try:
            response = self.client.chat.completions.create(
                model=self.name, messages=messages, max_tokens=max_tokens, temperature=0.0
            )
        except OpenAIError as exc:
            raise UpstreamError(f"The LLM endpoint failed: {exc}") from exc
        content = response.choices[0].message.content if response.choices else None
        if not content or not content.strip():
            raise UpstreamError("The LLM returned an empty answer.")
        return content.strip()


def configured_chat_model() -> ChatModel | None:
    """The chat model from settings, or ``None`` when ``KB_LLM_MODEL`` is unset."""
    if not settings.KB_LLM_MODEL:
        return None
    return OpenAIChatModel(settings.KB_LLM_MODEL)
