"""Where a local embedder runs: the CPU, or the GPU at fp16 (``KB_EMBED_DEVICE``).

``embed_device_resolve`` turns the setting into ``"cpu"`` or ``"cuda"`` for a backend:

* ``"cpu"`` (the default): the CPU, every backend;
* ``"cuda"``: the first GPU that PyTorch sees, with the model's weights in fp16 (half the memory,
  several times the fp32 throughput on tensor cores; the vectors stay within cosine 0.999 of
  fp32's, ``tests/knowledge/test_embed_device.py`` checks it on a GPU). Only the ``torch``
  backend runs there: the ONNX backends' export is an fp32 CPU graph and the requirements
  install ONNX Runtime's CPU build, so ``onnx``/``onnx-int8`` with ``cuda`` are refused rather
  than silently run elsewhere. ``ImproperlyConfigured`` too when no GPU is visible;
* ``"auto"``: ``"cuda"`` when the backend is ``torch`` and ``torch.cuda.is_available()``, else
  ``"cpu"`` (the ONNX backends stay on the CPU).

``embed_batch_size`` is the batch for a device: ``KB_EMBED_BATCH_SIZE`` on the CPU (64),
``KB_EMBED_BATCH_SIZE_CUDA`` on the GPU (256), where small batches leave most of it idle.
"""

from __future__ import annotations

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured

DEVICES = ("cpu", "cuda", "auto")


def cuda_available() -> bool:
    """Whether PyTorch sees a CUDA GPU (``False`` when PyTorch is not installed)."""
    try:
        import torch
    except ImportError:
        return False
    return bool(torch.cuda.is_available())


def embed_device_resolve(requested: str | None = None, *, backend: str | None = None) -> str:
    """``"cpu"`` or ``"cuda"``: where ``backend`` (default ``KB_EMBEDDER_BACKEND``) runs when
    ``requested`` (default ``KB_EMBED_DEVICE``) is asked for; see the module docstring.

    ``ImproperlyConfigured`` for an unknown device, ``"cuda"`` with an ONNX backend, or
    ``"cuda"`` where PyTorch sees no GPU; the message names the setting to change.
    """
    requested = requested or settings.KB_EMBED_DEVICE
    backend = backend or settings.KB_EMBEDDER_BACKEND
    if requested not in DEVICES:
        raise ImproperlyConfigured(f"KB_EMBED_DEVICE={requested!r} is not one of {', '.join(DEVICES)}.")
    if requested == "cpu":
        return "cpu"
    if requested == "auto":
        return "cuda" if backend == "torch" and cuda_available() else "cpu"
    if backend != "torch":
        raise ImproperlyConfigured(
            f"KB_EMBED_DEVICE=cuda needs KB_EMBEDDER_BACKEND=torch (the {backend!r} backend runs an fp32 ONNX "
            "graph on the CPU); set KB_EMBEDDER_BACKEND=torch, or KB_EMBED_DEVICE=cpu or auto."
        )
    if not cuda_available():
        raise ImproperlyConfigured(
            "KB_EMBED_DEVICE=cuda but PyTorch sees no CUDA GPU here (torch.cuda.is_available() is False: "
            "no GPU, no driver, or a CPU-only torch build); use KB_EMBED_DEVICE=auto or cpu on this machine."
        )
    return "cuda"


def embed_batch_size(device: str) -> int:
    """Texts per forward pass on ``device`` (``"cpu"`` or ``"cuda"``): ``KB_EMBED_BATCH_SIZE``
    or ``KB_EMBED_BATCH_SIZE_CUDA``."""
    return settings.KB_EMBED_BATCH_SIZE_CUDA if device == "cuda" else settings.KB_EMBED_BATCH_SIZE
