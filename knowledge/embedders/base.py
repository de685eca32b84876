"""What every embedder shares: the ``Embedder`` protocol, the query cache, the content-hash
embedding cache, the runtimes and the error raised when a model is not installed."""

from __future__ import annotations

import hashlib
import threading
from collections import OrderedDict
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
    """``embed_query`` for an embedder with ``embed``: one text, answered from a per-instance LRU;
    and ``embedding_cache``, the instance's ``EmbeddingCache`` that its ``embed`` goes through.

    The cache (``functools.lru_cache``, thread-safe) holds ``KB_QUERY_EMBED_CACHE`` entries
    (0 disables it) as read-only arrays; callers get a fresh writable copy, so nothing a caller
    does can change what the next caller receives. ``query_cache_info()`` gives hits and misses.
    """

    def _init_query_cache(self, size: int | None = None) -> None:
        size = settings.KB_QUERY_EMBED_CACHE if size is None else size
        self._cached_query = lru_cache(maxsize=size)(self._embed_query_uncached)
        self.embedding_cache = EmbeddingCache(settings.KB_EMBED_CACHE)

    def _embed_query_uncached(self, text: str) -> np.ndarray:
        # Past the embedding cache: queries would only crowd out the ingested texts it is for.
        vector = np.array(self._embed_uncached([text])[0], dtype=np.float32)  # type: ignore[attr-defined]
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


class EmbeddingCache:
    """A bounded, thread-safe LRU of vectors by the SHA-256 of their text: (model, text) -> vector,
    the model being the embedder instance that owns the cache.

    Re-ingesting unchanged text (a sync of an edited document keeps most of its chunks, a new
    version of a near-duplicate page, re-indexing) and texts repeated within one batch are embedded
    once per process. ``size`` entries at most (``KB_EMBED_CACHE``; 0 disables it): about
    ``size x dimensions x 4`` bytes, 31 MB for 20,000 MiniLM vectors. Vectors are stored read-only
    and handed out as copies inside the caller's array.
    """

    def __init__(self, size: int):
        self.size = size
        self.hits = 0
        self.misses = 0
        self._vectors: OrderedDict[bytes, np.ndarray] = OrderedDict()
        self._lock = threading.Lock()

    @staticmethod
    def digest(text: str) -> bytes:
        """The cache key of ``text``: its UTF-8 SHA-256 (32 bytes)."""
        return hashlib.sha256(text.encode("utf-8", "surrogatepass")).digest()

    def embed(self, texts: list[str], compute) -> np.ndarray:
        """Return ``(len(texts), dimensions)`` float32 rows for ``texts``: cached rows as they are,
        the others (each distinct text once) from ``compute(missing_texts)``, which must return
        one row per text in order; those are then cached. Errors of ``compute`` propagate and
        nothing of that call is cached."""
        if not self.size or not texts:
            return compute(texts)
        keys = [self.digest(text) for text in texts]
        found: dict[int, np.ndarray] = {}
        missing: dict[bytes, list[int]] = {}
        with self._lock:
            for row, key in enumerate(keys):
                vector = self._vectors.get(key)
                if vector is None:
                    missing.setdefault(key, []).append(row)
                else:
                    self._vectors.move_to_end(key)
                    found[row] = vector
            self.hits += len(found)
            self.misses += len(missing)
        computed = None
        if missing:
            computed = np.asarray(compute([texts[rows[0]] for rows in missing.values()]), dtype=np.float32)
        dimensions = computed.shape[1] if computed is not None else len(next(iter(found.values())))
        out = np.empty((len(texts), dimensions), dtype=np.float32)
        for row, vector in found.items():
            out[row] = vector
        if computed is not None:
            with self._lock:
                for (key, rows), vector in zip(missing.items(), computed, strict=True):
                    out[rows] = vector
                    stored = vector.copy()
                    stored.setflags(write=False)
                    self._vectors[key] = stored
                    self._vectors.move_to_end(key)
                while len(self._vectors) > self.size:
                    self._vectors.popitem(last=False)
        return out

    def info(self) -> dict:
        """``{"hits", "misses", "entries", "size"}`` since the cache was made (texts, not calls)."""
        with self._lock:
            return {"hits": self.hits, "misses": self.misses, "entries": len(self._vectors), "size": self.size}

    def clear(self) -> None:
        """Forget every cached vector and the counts."""
        with self._lock:
            self._vectors.clear()
            self.hits = self.misses = 0
