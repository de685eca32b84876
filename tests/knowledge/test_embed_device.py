"""Where the local embedders run (KB_EMBED_DEVICE): the CPU by default, the GPU at fp16 when asked
and present, and a clear refusal when it cannot be had."""

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from django.core.exceptions import ImproperlyConfigured

from knowledge.embedders import LocalMiniLMEmbedder, device
from knowledge.embedders.device import embed_batch_size, embed_device_resolve
from tests.knowledge.test_embedders import SENTENCES

GPU = device.cuda_available()


@pytest.fixture
def gpu(monkeypatch):
    """Make PyTorch's answer to "is there a GPU?" what the test says (``gpu(True)``/``gpu(False)``)."""

    def set_gpu(present: bool) -> None:
        monkeypatch.setattr(device, "cuda_available", lambda: present)

    return set_gpu


def test_the_cpu_is_the_default_device_for_every_backend(settings, gpu):
    gpu(True)
    assert settings.KB_EMBED_DEVICE == "cpu"
    for backend in ("torch", "onnx", "onnx-int8"):
        assert embed_device_resolve(backend=backend) == "cpu"


def test_auto_takes_the_gpu_for_the_torch_backend_when_pytorch_sees_one(gpu):
    gpu(True)
    assert embed_device_resolve("auto", backend="torch") == "cuda"
    gpu(False)
    assert embed_device_resolve("auto", backend="torch") == "cpu"


def test_auto_keeps_the_onnx_backends_on_the_cpu_even_beside_a_gpu(gpu):
    gpu(True)
    assert embed_device_resolve("auto", backend="onnx") == "cpu"
    assert embed_device_resolve("auto", backend="onnx-int8") == "cpu"


def test_cuda_without_a_gpu_is_refused_with_a_message_naming_the_alternatives(gpu):
    gpu(False)
    with pytest.raises(ImproperlyConfigured, match="KB_EMBED_DEVICE=cuda but PyTorch sees no CUDA GPU.*auto or cpu"):
        embed_device_resolve("cuda", backend="torch")


def test_cuda_with_an_onnx_backend_is_refused_even_beside_a_gpu(gpu):
    gpu(True)
    with pytest.raises(ImproperlyConfigured, match="needs KB_EMBEDDER_BACKEND=torch"):
        embed_device_resolve("cuda", backend="onnx")


def test_an_unknown_device_is_refused():
    with pytest.raises(ImproperlyConfigured, match="'tpu' is not one of cpu, cuda, auto"):
        embed_device_resolve("tpu", backend="torch")


def test_each_device_has_its_own_batch_size(settings):
    settings.KB_EMBED_BATCH_SIZE, settings.KB_EMBED_BATCH_SIZE_CUDA = 48, 512
    assert embed_batch_size("cpu") == 48
    assert embed_batch_size("cuda") == 512


def test_an_embedder_asked_for_cuda_on_a_machine_without_a_gpu_fails_at_first_use(settings, gpu):
    gpu(False)
    settings.KB_EMBED_DEVICE = "cuda"
    with pytest.raises(ImproperlyConfigured, match="sees no CUDA GPU"):
        LocalMiniLMEmbedder(backend="torch")


@pytest.mark.skipif(GPU, reason="checks the CPU fallback of a machine without a GPU")
def test_an_embedder_set_to_auto_runs_on_the_cpu_here_with_the_cpu_batch(settings):
    settings.KB_EMBED_DEVICE = "auto"
    embedder = LocalMiniLMEmbedder(backend="torch")
    assert (embedder.device, embedder.half, embedder.batch_size) == ("cpu", False, settings.KB_EMBED_BATCH_SIZE)
    vectors = embedder.embed(SENTENCES[:4])
    assert vectors.shape == (4, 384) and vectors.dtype == np.float32
    assert np.allclose(np.linalg.norm(vectors, axis=1), 1, atol=1e-5)


@pytest.mark.skipif(not GPU, reason="needs a CUDA GPU (torch.cuda.is_available())")
def test_fp16_vectors_on_the_gpu_stay_within_cosine_0999_of_the_cpu_fp32_ones(settings):
    texts = SENTENCES + [" ".join(SENTENCES)] * 3  # short sentences and passages past 200 word pieces
    cpu = LocalMiniLMEmbedder(backend="torch", device="cpu")
    gpu = LocalMiniLMEmbedder(backend="torch", device="cuda")
    assert (gpu.device, gpu.half, gpu.batch_size) == ("cuda", True, settings.KB_EMBED_BATCH_SIZE_CUDA)
    reference, half = cpu.embed(texts), gpu.embed(texts)
    assert half.dtype == np.float32 and np.allclose(np.linalg.norm(half, axis=1), 1, atol=1e-5)
    assert (reference * half).sum(axis=1).min() >= 0.999


def test_the_server_refuses_to_start_with_cuda_and_an_onnx_backend():
    env = {**os.environ, "KB_EMBED_DEVICE": "cuda", "KB_EMBEDDER_BACKEND": "onnx"}
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            "import django, os; os.environ['DJANGO_SETTINGS_MODULE'] = 'config.settings'; django.setup()",
        ],
        cwd=Path(__file__).resolve().parents[2],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode != 0
    assert "KB_EMBED_DEVICE=cuda needs KB_EMBEDDER_BACKEND=torch" in done.stderr
