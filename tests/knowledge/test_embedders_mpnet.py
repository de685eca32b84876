import hashlib
import io
import itertools
import zipfile
from dataclasses import replace

import numpy as np
import pytest

from core.errors import ApplicationError
from knowledge.embedders import EmbedderUnavailable, LocalMPNetEmbedder, get_embedder, mpnet_installed
from knowledge.embedders import mpnet as mpnet_module
from knowledge.embedders.mpnet import MPNET_ARCHIVE, model_archive_unpack
from knowledge.models import Chunk
from knowledge.services import documents_ingest
from llm.local import LocalModelChecksumError, ModelPart
from retrieval.request import AnswerRequest
from retrieval.search import chunk_search
from tests.conftest import BIKE, PASTA, TAXES
from tests.factories import SourceFactory, TenantFactory
from tests.knowledge.test_embedders import SENTENCES

_names = itertools.count()


def _zip_bytes() -> bytes:
    """A small zip shaped like the real one: a model folder, a Windows desktop.ini, a stray file."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as bundle:
        bundle.writestr("tiny-model/modules.json", "[]")
        bundle.writestr("tiny-model/1_Pooling/config.json", '{"pooling_mode_mean_tokens": true}')
        bundle.writestr("tiny-model/desktop.ini", "[.ShellClassInfo]")
        bundle.writestr("elsewhere.txt", "not part of the model")
    return buffer.getvalue()


def fake_archive(tmp_path, monkeypatch, *, parts: int = 3, sha256: str | None = None, missing: int | None = None):
    """A ``PackagedFile`` whose parts are installed as tiny importable packages under ``tmp_path``
    (part ``missing``, 1-based, is left uninstalled); ``sha256`` overrides the recorded checksum."""
    data = _zip_bytes()
    site = tmp_path / "site"
    prefix = f"fake-embedder-part_{next(_names)}"
    size = -(-len(data) // parts)
    model_parts = []
    for n in range(1, parts + 1):
        module = f"{prefix}_{n:03d}"  # a hyphenated folder, like the real packages
        if n != missing:
            folder = site / module / "input"
            folder.mkdir(parents=True)
            (site / module / "__init__.py").write_text("")
            (folder / f"tiny.zip.{n:03d}").write_bytes(data[(n - 1) * size : n * size])
        model_parts.append(
            ModelPart(package=f"{prefix}-{n:03d}==0.0.1", module=module, resource=f"input/tiny.zip.{n:03d}")
        )
    monkeypatch.syspath_prepend(str(site))
    archive = replace(
        MPNET_ARCHIVE,
        alias="tiny-model",
        filename="tiny-model.zip",
        size=len(data),
        sha256=sha256 or hashlib.sha256(data).hexdigest(),
        parts=tuple(model_parts),
    )
    return archive, site


def test_the_parts_are_assembled_checked_and_unpacked_into_the_model_folder(tmp_path, monkeypatch):
    archive, _site = fake_archive(tmp_path, monkeypatch)
    models = tmp_path / "models"
    folder = model_archive_unpack(archive, root="tiny-model", directory=models)
    assert folder == models / "tiny-model"
    assert (folder / "modules.json").read_text() == "[]"
    assert (folder / "1_Pooling" / "config.json").is_file()
    assert not (folder / "desktop.ini").exists()
    assert not (models / "elsewhere.txt").exists()
    # The zip is deleted once unpacked: only the model folder and the lock remain.
    assert sorted(p.name for p in models.iterdir()) == [".tiny-model.lock", "tiny-model"]


def test_an_unpacked_model_is_reused_without_its_parts(tmp_path, monkeypatch):
    import shutil

    archive, site = fake_archive(tmp_path, monkeypatch)
    models = tmp_path / "models"
    folder = model_archive_unpack(archive, root="tiny-model", directory=models)
    before = (folder / "modules.json").stat()
    shutil.rmtree(site)  # the packages are gone (uninstalled, or a later start that never needs them)
    assert model_archive_unpack(archive, root="tiny-model", directory=models) == folder
    after = (folder / "modules.json").stat()
    assert (after.st_ino, after.st_mtime_ns) == (before.st_ino, before.st_mtime_ns)


def test_parts_that_do_not_match_the_recorded_checksum_are_refused_and_leave_nothing(tmp_path, monkeypatch):
    archive, _site = fake_archive(tmp_path, monkeypatch, sha256="0" * 64)
    models = tmp_path / "models"
    with pytest.raises(EmbedderUnavailable, match="damaged") as error:
        model_archive_unpack(archive, root="tiny-model", directory=models)
    assert isinstance(error.value.__cause__, LocalModelChecksumError)
    assert [p.name for p in models.iterdir()] == [".tiny-model.lock"]


def test_a_missing_part_names_its_package_and_the_requirements_file_to_install(tmp_path, monkeypatch):
    archive, _site = fake_archive(tmp_path, monkeypatch, missing=2)
    models = tmp_path / "models"
    with pytest.raises(EmbedderUnavailable) as error:
        model_archive_unpack(archive, root="tiny-model", directory=models)
    message = str(error.value)
    assert "pip install -r requirements-mpnet.txt" in message
    assert archive.parts[1].package in message
    assert isinstance(error.value, ApplicationError) and error.value.status == 503
    assert [p.name for p in models.iterdir()] == [".tiny-model.lock"]


def test_a_tenant_whose_embedder_is_not_installed_gets_the_install_message_and_no_data(
    tmp_path, monkeypatch, settings, db
):
    archive, _site = fake_archive(tmp_path, monkeypatch, missing=1)
    monkeypatch.setattr(mpnet_module, "MPNET_ARCHIVE", archive)
    monkeypatch.setattr(mpnet_module, "MPNET_ROOT", "tiny-model")
    settings.KB_DATA_DIR = str(tmp_path / "data")
    tenant = TenantFactory(embedder="mpnet")
    get_embedder.cache_clear()
    try:
        assert not mpnet_installed()
        with pytest.raises(EmbedderUnavailable, match="requirements-mpnet.txt"):
            documents_ingest(tenant=tenant, source=SourceFactory(tenant=tenant), documents=[PASTA])
    finally:
        get_embedder.cache_clear()
    assert not Chunk.objects.for_tenant(tenant).exists()


# The real model (requirements-mpnet.txt): assembled and exported to ONNX once into KB_DATA_DIR.
needs_mpnet = pytest.mark.skipif(not mpnet_installed(), reason="pip install -r requirements-mpnet.txt")


@pytest.fixture(scope="module")
def mpnet():
    return LocalMPNetEmbedder(backend="onnx")


@needs_mpnet
def test_mpnet_on_onnx_gives_the_torch_vectors_of_768_dimensions(mpnet):
    reference = LocalMPNetEmbedder(backend="torch").embed(SENTENCES)
    vectors = mpnet.embed(SENTENCES)
    assert vectors.shape == (len(SENTENCES), 768) and vectors.dtype == np.float32
    assert np.allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    assert np.min(np.sum(reference * vectors, axis=1)) > 0.999


@needs_mpnet
def test_a_tenant_with_the_mpnet_embedder_ingests_and_finds_the_answer_in_every_mode(mpnet, db):
    tenant = TenantFactory(embedder="mpnet")
    documents_ingest(tenant=tenant, source=SourceFactory(tenant=tenant), documents=[PASTA, BIKE, TAXES])
    chunks = list(Chunk.objects.for_tenant(tenant))
    assert chunks and {c.embedder for c in chunks} == {"mpnet"}
    assert {len(c.embedding) for c in chunks} == {768}
    for mode in ("dense", "hybrid"):
        response = chunk_search(
            AnswerRequest(question="How do I find the hole in a flat inner tube?", k=3, mode=mode), tenant=tenant
        )
        assert response.results[0].chunk.version.document.external_id == "howto/bike-tyre"
