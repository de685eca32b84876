"""Pictures inside an uploaded office file built to exhaust the server: a .docx whose PNG declares
50,000 x 50,000 pixels (2.5 gigapixels, a decompression bomb whose few kilobytes of zeros would
unpack to 7.5 GB), and one of 7,000 x 6,000 (42 megapixels, just over ``MAX_PIXELS``, which
Pillow alone would open).

Neither picture is decoded (a watch on Pillow's decoder, inherited by the parse sandbox's forked
child, writes a file if one is) nor kept: the upload still ingests the document's text, with the
pictures' alternative text at their places, and keeps only the honest chart beside it, a PNG
within ``MAX_SIDE_PX`` and ``MAX_BYTES``, under the uploading tenant's own folder. With the pixel
cap lifted the 42-megapixel picture is decoded, which shows the watch can see it.
"""

from __future__ import annotations

import io
import struct
import zlib
from pathlib import Path

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from PIL import Image, ImageFile

from knowledge.figures import MAX_BYTES, MAX_SIDE_PX
from knowledge.ingestion import office_images
from knowledge.ingestion.office_images import MAX_PIXELS, ImageReader
from knowledge.models import Document, IngestionJob
from knowledge.originals import document_originals_folder, tenant_originals_folder
from tests.factories import TenantFactory

TEXT = "Quarterly cellar inventory: the cellar holds four hundred casks."
BOMB, LARGE = (50_000, 50_000), (7_000, 6_000)


@pytest.fixture(autouse=True)
def no_ocr(settings):
    """Pictures keep their alternative text: no OCR engine is needed (nor would one be reached)."""
    settings.KB_OCR_ENGINE = "off"


def declared_png(width: int, height: int) -> bytes:
    """A PNG whose header declares ``width`` x ``height`` RGB pixels, followed by 4 MB of zeros
    deflated to a few kilobytes: far fewer rows than it declares, as a bomb's sender needs."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    pixels = zlib.compress(b"\0" * 4 * 2**20, 9)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", pixels) + chunk(b"IEND", b"")


def chart_png() -> bytes:
    chart = Image.new("RGB", (900, 450), "white")
    chart.paste((120, 60, 20), (100, 100, 800, 400))
    out = io.BytesIO()
    chart.save(out, format="PNG")
    return out.getvalue()


def docx_of(pictures: list[tuple[bytes, str]]) -> bytes:
    """A .docx: ``TEXT``, then each picture (its bytes, its alternative text) in a paragraph."""
    import docx
    from docx.shared import Inches

    document = docx.Document()
    document.add_paragraph(TEXT)
    for data, _alt in pictures:
        document.add_picture(io.BytesIO(data), width=Inches(4))
    for description, (_data, alt) in zip(document.element.body.xpath(".//wp:docPr"), pictures, strict=True):
        description.set("descr", alt)
    out = io.BytesIO()
    document.save(out)
    return out.getvalue()


@pytest.fixture
def decodes(monkeypatch, tmp_path) -> Path:
    """A watch on Pillow's decoder: decoding a picture over ``MAX_PIXELS`` writes its size into the
    returned file (from the sandbox's child too: it is forked with the watch in place)."""
    seen = tmp_path / "decoded-oversized"
    load = ImageFile.ImageFile.load

    def watched(self):
        if self.width * self.height > MAX_PIXELS:
            with open(seen, "a") as file:
                file.write(f"{self.width}x{self.height}\n")
        return load(self)

    monkeypatch.setattr(ImageFile.ImageFile, "load", watched)
    return seen


@pytest.mark.parametrize("size", [BOMB, LARGE], ids=["2.5 gigapixels", "42 megapixels"])
def test_the_reader_keeps_an_oversized_pictures_alternative_text_and_never_decodes_it(decodes, size):
    reader = ImageReader(name="cellar.docx")

    block = reader.block(declared_png(*size), alt="Cellar floor plan", caption="Figure 1: Cellar")

    assert block.text == "[Image: Cellar floor plan]"
    assert getattr(block, "picture", None) is None and reader.kept == reader.kept_bytes == 0
    assert not decodes.exists()


def upload_docx(client, data: bytes, capture) -> IngestionJob:
    with capture(execute=True):
        response = client.post(
            "/api/v1/documents/", {"file": SimpleUploadedFile("cellar.docx", data)}, format="multipart"
        )
    assert response.status_code == 202, response.content
    return IngestionJob.objects.get(pk=response.json()["id"])


def pngs_under(folder: Path) -> list[Path]:
    return sorted(path for path in folder.rglob("*") if path.is_file() and path.read_bytes()[:4] == b"\x89PNG")


def test_an_upload_with_picture_bombs_ingests_its_text_and_keeps_only_the_honest_chart_in_its_tenants_folder(
    tenant, editor_client, settings, decodes, django_capture_on_commit_callbacks
):
    bystander = TenantFactory(slug="bystander")
    pictures = [
        (chart_png(), "Cask chart"),
        (declared_png(*BOMB), "Huge cellar photo"),
        (declared_png(*LARGE), "Large cellar photo"),
    ]

    job = upload_docx(editor_client, docx_of(pictures), django_capture_on_commit_callbacks)

    job.refresh_from_db()
    assert job.status == "done", job.error
    document = Document.objects.get(tenant=tenant, external_id="cellar.docx")
    text = document.versions.get(is_current=True).text
    assert TEXT in text
    assert "[Image: Huge cellar photo]" in text and "[Image: Large cellar photo]" in text
    assert [f["caption"] for f in document.metadata["figures"]] == ["Cask chart"]
    assert not decodes.exists(), decodes.read_text()

    [kept] = pngs_under(settings.KB_DATA_DIR)  # one picture stored on the whole server
    assert kept.parent == document_originals_folder(tenant_id=tenant.pk, document_id=document.pk)
    assert kept.stat().st_size <= MAX_BYTES
    assert max(Image.open(kept).size) <= MAX_SIDE_PX
    assert kept.is_relative_to(tenant_originals_folder(tenant.pk))
    assert not kept.is_relative_to(tenant_originals_folder(bystander.pk))


def test_with_the_pixel_cap_lifted_the_large_picture_is_decoded(
    editor_client, decodes, monkeypatch, django_capture_on_commit_callbacks
):
    """The watch sees a decode when the cap is not there: the test above could fail."""
    monkeypatch.setattr(office_images, "MAX_PIXELS", 10**12)

    upload_docx(
        editor_client, docx_of([(declared_png(*LARGE), "Large cellar photo")]), django_capture_on_commit_callbacks
    )

    assert decodes.read_text().split() == [f"{LARGE[0]}x{LARGE[1]}"]
