"""What every embedder shares: the ``Embedder`` protocol, the query cache, the runtimes and the
error raised when a model is not installed."""

from __future__ import annotations

from functools import lru_cache
from typing import Protocol

import numpy as np
from django.conf import settings

from core.errors import ApplicationError

BACKENDS = ("torch", "onnx", "onnx-int8")


class EmbedderUnavailable(ApplicationError):
    """An embedder's model is not installed on this machine; the message says what to install."""

    code = "embedder_unavailable"
    status = 503


class Embedder(Protocol):
    key: str
    dimensions: int

    def embed(self, texts: list[str]) -> np.ndarray:
        """Return an array of shape ``(len(texts), dimensions)``, float32, unit length rows."""

    def embed_query(self, text: str) -> np.ndarray:
        """Return one query's vector, shape ``(dimensions,)``, float32, unit length (LRU-cached)."""


class QueryCacheMixin:
    """``embed_query`` for an embedder with ``embed``: one text, answered from a per-instance LRU.

    The cache (``functools.lru_cache``, thread-safe) holds ``KB_QUERY_EMBED_CACHE`` entries
    (0 disables it) as read-only arrays; callers get a fresh writable copy, so nothing a caller
    does can change what the next caller receives. ``query_cache_info()`` gives hits and misses.
    """

    def _init_query_cache(self, size: int | None = None) -> None:
        size = settings.KB_QUERY_EMBED_CACHE if size is None else size
        self._cached_query = lru_cache(maxsize=size)(self._embed_query_uncached)

    def _embed_query_uncached(self, text: str) -> np.ndarray:
        vector = np.array(self.embed([text])[0], dtype=np.float32)  # type: ignore[attr-defined]
        vector.setflags(write=False)
        return vector

    def embed_query(self, text: str) -> np.ndarray:
        """Return ``text``'s vector: shape ``(dimensions,)``, float32, unit length, a copy."""
        return self._cached_query(text).copy()

    def query_cache_info(self):
        """``functools`` cache statistics: ``hits``, ``misses``, ``maxsize``, ``currsize``."""
        return self._cached_query.cache_info()

    def query_cache_clear(self) -> None:
        """Forget every cached query vector."""
        self._cached_query.cache_clear()
