import json
import threading
from http.server import BaseHTTPRequestHandler, HTTPServer

import numpy as np
import pytest

from core.errors import UpstreamError
from knowledge.embedders import LocalMiniLMEmbedder, OpenAIEmbedder, get_embedder


class EmbeddingsEndpoint(BaseHTTPRequestHandler):
    """A stand-in OpenAI-compatible /v1/embeddings endpoint: vector = [len(text), 1, 0]."""

    def do_POST(self):
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
