import json
import os
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path

import numpy as np
import pytest
from django.core.exceptions import ImproperlyConfigured

from core.errors import UpstreamError
from knowledge.embedders import LocalMiniLMEmbedder, OpenAIEmbedder, get_embedder, onnx_export_ensure
from knowledge.embedders.base import EmbeddingCache
from tests.conftest import BIKE, PASTA, TAXES

# Real sentences: the fixture documents' sentences and a few questions about them.
SENTENCES = [s.strip() for d in (PASTA, BIKE, TAXES) for s in d.text.replace("\n\n", ". ").split(". ") if s.strip()] + [
    "How long should spaghetti cook?",
    "Who approves expense reports above five hundred euros?",
    "How do I find a puncture in an inner tube?",
]


class EmbeddingsEndpoint(BaseHTTPRequestHandler):
    """A stand-in OpenAI-compatible /v1/embeddings endpoint: vector = [len(text), 1, 0]."""

    requests = 0

    def do_POST(self):
        EmbeddingsEndpoint.requests += 1
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        if body["model"] == "broken":
            self.send_response(500)
            self.end_headers()
            return
        data = [
            {"object": "embedding", "index": i, "embedding": [float(len(t)), 1.0, 0.0]}
            for i, t in enumerate(body["input"])
        ]
        payload = json.dumps(
            {
                "object": "list",
                "data": list(reversed(data)),
                "model": body["model"],
                "usage": {"prompt_tokens": 1, "total_tokens": 1},
            }
        ).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def log_message(self, *args):
        pass


@pytest.fixture
def endpoint(settings):
    server = HTTPServer(("127.0.0.1", 0), EmbeddingsEndpoint)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    settings.OPENAI_BASE_URL = f"http://127.0.0.1:{server.server_port}/v1"
    settings.OPENAI_API_KEY = "test"
    yield
    server.shutdown()


def test_the_openai_compatible_embedder_batches_orders_and_normalizes(endpoint):
    embedder = OpenAIEmbedder("stub-model", batch_size=2)
    vectors = embedder.embed(["a", "bbb", "cc"])
    assert vectors.shape == (3, 3) and embedder.dimensions == 3
    assert np.allclose(np.linalg.norm(vectors, axis=1), 1.0)
    expected = np.array([[1, 1, 0], [3, 1, 0], [2, 1, 0]], dtype=np.float32)
    assert np.allclose(vectors, expected / np.linalg.norm(expected, axis=1, keepdims=True))


def test_an_embedding_endpoint_failure_is_an_upstream_error(endpoint):
    with pytest.raises(UpstreamError):
        OpenAIEmbedder("broken").embed(["text"])


def test_the_local_embedder_gives_unit_vectors_of_384_dimensions():
    vectors = get_embedder("local").embed(["a sentence", "another one"])
    assert isinstance(get_embedder("local"), LocalMiniLMEmbedder)
    assert vectors.shape == (2, 384)
    assert np.allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)


def test_an_unknown_embedder_key_is_refused():
    with pytest.raises(ValueError):
        get_embedder("word2vec")


@pytest.fixture(scope="module")
def backends():
    """The local model on each backend (the ONNX export is made once into KB_DATA_DIR), each
    without its embedding cache, so every call runs the model."""
    embedders = {b: LocalMiniLMEmbedder(backend=b) for b in ("torch", "onnx", "onnx-int8")}
    for embedder in embedders.values():
        embedder.embedding_cache = EmbeddingCache(0)
    return embedders


def test_the_onnx_backend_gives_the_torch_backends_vectors(backends):
    reference = backends["torch"].embed(SENTENCES)
    vectors = backends["onnx"].embed(SENTENCES)
    assert vectors.shape == (len(SENTENCES), 384) and vectors.dtype == np.float32
    assert np.min(np.sum(reference * vectors, axis=1)) > 0.999


def test_the_int8_backend_stays_within_cosine_099_of_torch_on_average(backends):
    reference = backends["torch"].embed(SENTENCES)
    vectors = backends["onnx-int8"].embed(SENTENCES)
    cosines = np.sum(reference * vectors, axis=1)
    assert np.allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    assert cosines.mean() > 0.99 and cosines.min() > 0.97


def test_onnx_batches_keep_the_order_of_the_input_texts(backends):
    one_by_one = np.stack([backends["onnx"].embed([s])[0] for s in SENTENCES])
    assert np.allclose(backends["onnx"].embed(SENTENCES), one_by_one, atol=1e-5)


def test_an_embedder_capped_at_one_thread_runs_on_one_and_gives_the_same_vectors(backends, settings):
    settings.KB_EMBED_THREADS = 1
    capped = LocalMiniLMEmbedder(backend="onnx")
    assert capped.session.get_session_options().intra_op_num_threads == 1
    assert np.allclose(capped.embed(SENTENCES), backends["onnx"].embed(SENTENCES), atol=1e-5)


def test_an_existing_onnx_export_is_reused_by_the_next_embedder(backends):
    path = backends["onnx"].onnx_path
    before = path.stat()
    LocalMiniLMEmbedder(backend="onnx")
    after = path.stat()
    assert (after.st_ino, after.st_mtime_ns) == (before.st_ino, before.st_mtime_ns)


def test_two_processes_starting_together_export_once_and_both_embed(tmp_path):
    script = (
        "import django, os, sys; django.setup(); from knowledge.embedders import LocalMiniLMEmbedder; "
        "e = LocalMiniLMEmbedder(backend='onnx-int8', cache_dir=__import__('pathlib').Path(sys.argv[1])); "
        "print(e.onnx_path.stat().st_ino, e.embed(['hello']).shape)"
    )
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "config.settings"}
    root = Path(__file__).resolve().parents[2]
    runs = [
        subprocess.Popen(
            [sys.executable, "-c", script, str(tmp_path)], cwd=root, env=env, stdout=subprocess.PIPE, text=True
        )
        for _ in range(2)
    ]
    outputs = [run.communicate(timeout=600)[0].strip() for run in runs]
    assert [run.returncode for run in runs] == [0, 0]
    assert outputs[0] == outputs[1] and outputs[0].endswith("(1, 384)")
    folder = onnx_export_ensure(cache_dir=tmp_path)["onnx"].parent
    assert sorted(p.name for p in folder.iterdir()) == [".lock", "model-int8.onnx", "model.onnx"]


def test_an_unknown_embedder_backend_is_refused():
    with pytest.raises(ImproperlyConfigured, match="gpu"):
        LocalMiniLMEmbedder(backend="gpu")


def test_a_bad_kb_embedder_backend_setting_stops_start_up_with_a_message():
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "config.settings", "KB_EMBEDDER_BACKEND": "cuda"}
    result = subprocess.run(
        [sys.executable, "-c", "import django; django.setup()"],
        cwd=Path(__file__).resolve().parents[2],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode != 0
    assert "KB_EMBEDDER_BACKEND='cuda' is not one of torch, onnx, onnx-int8" in result.stderr


def test_a_repeated_query_is_answered_from_the_cache(backends):
    embedder = backends["onnx"]
    embedder.query_cache_clear()
    first = embedder.embed_query("How long should spaghetti cook?")
    second = embedder.embed_query("How long should spaghetti cook?")
    assert first.shape == (384,) and first.dtype == np.float32
    assert np.array_equal(first, second)
    assert np.allclose(first, embedder.embed(["How long should spaghetti cook?"])[0], atol=1e-6)
    info = embedder.query_cache_info()
    assert (info.hits, info.misses) == (1, 1)


def test_a_cached_query_vector_cannot_be_changed_by_a_caller(backends):
    embedder = backends["onnx"]
    original = embedder.embed_query("Who approves expense reports?").copy()
    returned = embedder.embed_query("Who approves expense reports?")
    returned[:] = 0.0
    assert np.array_equal(embedder.embed_query("Who approves expense reports?"), original)


def test_each_embedder_has_its_own_query_cache(backends):
    for embedder in backends.values():
        embedder.query_cache_clear()
    backends["onnx"].embed_query("Fixing a flat tyre")
    int8 = backends["onnx-int8"].embed_query("Fixing a flat tyre")
    assert backends["onnx-int8"].query_cache_info().hits == 0
    assert np.allclose(int8, backends["onnx-int8"].embed(["Fixing a flat tyre"])[0], atol=1e-6)


def test_a_repeated_query_does_not_call_the_embedding_endpoint_again(endpoint):
    embedder = OpenAIEmbedder("stub-model")
    before = EmbeddingsEndpoint.requests
    embedder.embed_query("expense policy")
    embedder.embed_query("expense policy")
    assert EmbeddingsEndpoint.requests == before + 1


def test_a_query_cache_of_size_zero_embeds_every_query(endpoint, settings):
    settings.KB_QUERY_EMBED_CACHE = 0
    embedder = OpenAIEmbedder("stub-model")
    before = EmbeddingsEndpoint.requests
    embedder.embed_query("expense policy")
    embedder.embed_query("expense policy")
    assert EmbeddingsEndpoint.requests == before + 2


def test_a_text_embedded_again_is_answered_from_the_embedding_cache(endpoint):
    embedder = OpenAIEmbedder("stub-model")
    before = EmbeddingsEndpoint.requests
    first = embedder.embed(["a", "bbb"])
    again = embedder.embed(["bbb", "a"])
    assert EmbeddingsEndpoint.requests == before + 1
    assert np.array_equal(again, first[::-1])
    assert embedder.embedding_cache.info() | {"size": None} == {"hits": 2, "misses": 2, "entries": 2, "size": None}


def test_only_the_texts_not_in_the_embedding_cache_reach_the_model():
    sent: list[list[str]] = []

    def compute(texts):
        sent.append(list(texts))
        return np.array([[float(len(t)), 1.0] for t in texts], dtype=np.float32)

    cache = EmbeddingCache(10)
    cache.embed(["a", "bb"], compute)
    vectors = cache.embed(["bb", "ccc", "ccc", "a"], compute)
    assert sent == [["a", "bb"], ["ccc"]]
    assert vectors.tolist() == [[2.0, 1.0], [3.0, 1.0], [3.0, 1.0], [1.0, 1.0]]


def test_the_embedding_cache_forgets_the_least_recently_used_text_past_its_size():
    sent: list[str] = []

    def compute(texts):
        sent.extend(texts)
        return np.ones((len(texts), 2), dtype=np.float32)

    cache = EmbeddingCache(2)
    cache.embed(["a", "b"], compute)
    cache.embed(["a"], compute)  # "b" is now the least recently used
    cache.embed(["c"], compute)
    cache.embed(["a", "b"], compute)
    assert sent == ["a", "b", "c", "b"]
    assert cache.info()["entries"] == 2


def test_a_failed_embedding_leaves_nothing_in_the_embedding_cache(endpoint):
    embedder = OpenAIEmbedder("broken")
    with pytest.raises(UpstreamError):
        embedder.embed(["text"])
    assert embedder.embedding_cache.info()["entries"] == 0


def test_an_embedding_cache_of_size_zero_embeds_every_text(endpoint, settings):
    settings.KB_EMBED_CACHE = 0
    embedder = OpenAIEmbedder("stub-model")
    before = EmbeddingsEndpoint.requests
    embedder.embed(["expense policy"])
    embedder.embed(["expense policy"])
    assert EmbeddingsEndpoint.requests == before + 2


def test_the_local_embedders_cached_vectors_are_its_models_vectors():
    embedder = LocalMiniLMEmbedder(backend="onnx")
    first = embedder.embed(SENTENCES[:4])
    mixed = embedder.embed(SENTENCES[2:6])
    assert embedder.embedding_cache.info()["hits"] == 2
    assert np.allclose(mixed, embedder._embed_uncached(SENTENCES[2:6]), atol=1e-5)
    assert np.array_equal(mixed[:2], first[2:])
