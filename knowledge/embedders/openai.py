"""``OpenAIEmbedder``: embeddings from any OpenAI-compatible ``/embeddings`` endpoint."""

from __future__ import annotations

import numpy as np
from django.conf import settings

from core.errors import UpstreamError
from knowledge.embedders.base import QueryCacheMixin


class OpenAIEmbedder(QueryCacheMixin):
    """Embeddings from an OpenAI-compatible endpoint (``OPENAI_BASE_URL``, ``OPENAI_API_KEY``).

    The dimension is learned from the first response. Raises ``UpstreamError`` on failure.
    """

    def __init__(self, model: str, batch_size: int | None = None, *, query_cache_size: int | None = None):
        from openai import OpenAI

        self.model = model
        self.key = f"openai:{model}"
        self.batch_size = batch_size or settings.KB_EMBED_BATCH_SIZE
        self.client = OpenAI(
            api_key=settings.OPENAI_API_KEY or "not-needed",
            base_url=settings.OPENAI_BASE_URL or None,
            timeout=settings.KB_LLM_TIMEOUT_S,
            max_retries=3,
        )
        self._dimensions: int | None = None
        self._init_query_cache(query_cache_size)

    @property
    def dimensions(self) -> int:
        if self._dimensions is None:
            self.embed(["dimension probe"])
        assert self._dimensions is not None
        return self._dimensions

    def embed(self, texts: list[str]) -> np.ndarray:
        """Return ``(len(texts), dimensions)`` float32 unit rows, in the order of ``texts``; texts
        embedded before by this instance come from its ``embedding_cache``. Raises
        ``UpstreamError`` when the endpoint fails."""
        return self.embedding_cache.embed(texts, self._embed_uncached)

    def _embed_uncached(self, texts: list[str]) -> np.ndarray:
        from openai import OpenAIError

        rows: list[list[float]] = []
        for i in range(0, len(texts), self.batch_size):
            try:
                response = self.client.embeddings.create(model=self.model, input=texts[i : i + self.batch_size])
            except OpenAIError as exc:
                raise UpstreamError(f"Embedding endpoint failed: {exc}") from exc
            rows.extend(item.embedding for item in sorted(response.data, key=lambda d: d.index))
        vectors = np.asarray(rows, dtype=np.float32).reshape(len(rows), -1)
        if len(vectors):
            self._dimensions = vectors.shape[1]
            vectors /= np.maximum(np.linalg.norm(vectors, axis=1, keepdims=True), 1e-12)
        return vectors
