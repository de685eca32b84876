"""Fixtures for the retrieval tests: the real local LLM server, started once per session."""

import socket
import subprocess

import pytest
from django.conf import settings


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="session")
def local_llm_url():
    """The ``/v1`` URL of the real local LLM server (llama.cpp + Gemma 3 270M, model ``gemma-3-270m``)."""
    from retrieval.local_llm import local_llm_start

    port = free_port()
    process = local_llm_start(settings.KB_DATA_DIR, port=port)
    yield f"http://127.0.0.1:{port}/v1"
    process.terminate()
    try:
        process.wait(10)
    except subprocess.TimeoutExpired:
        process.kill()
