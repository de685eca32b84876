"""OCR (knowledge.ingestion.ocr): both engines read a rendered sentence, OCR off is said so, a
parse's time limit grows with the pages OCR reads, and KB_OCR_QUEUE sends the jobs whose files
need OCR to workers of their own."""

import io
import resource
import shutil
import time
import uuid

import pytest
import redis
from django.conf import settings as django_settings
from PIL import Image, ImageDraw, ImageFont

from core.errors import InvalidInput
from knowledge.ingestion import sandbox
from knowledge.ingestion.ocr import OcrDeferred, OcrLine, OcrUnavailable, _reading_order, ocr_deferred, ocr_image
from knowledge.models import Document, IngestionJob
from knowledge.services import ingestion_job_run, ingestion_jobs_recover, upload_ingest
from tests.knowledge.test_jobs import BROKER, job_queue  # noqa: F401

SENTENCE = "Expense claims are paid within ten working days."
FONT = "/usr/share/fonts/truetype/dejavu/DejaVuSerif.ttf"
needs_tesseract = pytest.mark.skipif(
    shutil.which("tesseract") is None, reason="the tesseract binary is not installed (apt install tesseract-ocr)"
)


def _rendered(text: str = SENTENCE, *, size=(1400, 220)) -> Image.Image:
    """``text`` in black on white at 44 px (a 16 pt line scanned at 200 dpi)."""
    image = Image.new("L", size, 255)
    ImageDraw.Draw(image).text((40, 80), text, fill=0, font=ImageFont.truetype(FONT, 44))
    return image


def _scanned_pdf(text: str = SENTENCE) -> bytes:
    """A one-page PDF holding only a picture of ``text``: no text layer, as a scanner makes."""
    out = io.BytesIO()
    _rendered(text, size=(1654, 600)).save(out, format="PDF", resolution=200)
    return out.getvalue()


@pytest.mark.parametrize("engine", ["rapidocr", pytest.param("tesseract", marks=needs_tesseract)])
def test_each_engine_reads_a_rendered_sentence_with_its_line_box_and_confidence(engine):
    result = ocr_image(_rendered(), engine=engine)
    assert result.text == SENTENCE
    [line] = result.lines
    x0, top, x1, bottom = line.box
    assert 20 <= x0 <= 60 and 60 <= top <= 100 and 900 <= x1 <= 1300 and 110 <= bottom <= 150
    assert 0.8 <= line.confidence <= 1.0


@pytest.mark.parametrize("engine", ["rapidocr", pytest.param("tesseract", marks=needs_tesseract)])
def test_an_image_without_text_reads_as_nothing(engine):
    result = ocr_image(Image.new("RGB", (600, 400), "white"), engine=engine)
    assert (result.text, result.lines) == ("", [])


def test_with_ocr_off_reading_an_image_raises_ocr_unavailable_an_invalid_input(settings):
    settings.KB_OCR_ENGINE = "off"
    with pytest.raises(OcrUnavailable) as raised:
        ocr_image(_rendered())
    assert isinstance(raised.value, InvalidInput) and raised.value.code == "ocr_unavailable"
    assert "KB_OCR_ENGINE=off" in raised.value.message


def test_an_engine_that_is_not_installed_is_unavailable(settings, monkeypatch):
    monkeypatch.setenv("PATH", "/nonexistent")
    with pytest.raises(OcrUnavailable, match="tesseract binary is not installed"):
        ocr_image(_rendered(), engine="tesseract")


def test_a_two_column_page_is_read_column_by_column_with_its_title_first():
    def piece(text, x0, top, x1):
        return OcrLine(text, (x0, top, x1, top + 30), 0.9)

    left = [piece(f"left {n}", 100, 200 + 40 * n, 560) for n in range(4)]
    right = [piece(f"right {n}", 660, 200 + 40 * n, 1120) for n in range(4)]
    title = piece("A title across both columns", 300, 100, 900)
    paragraphs = _reading_order([*right, title, *left], width=1240)
    assert [[line.text for line in paragraph] for paragraph in paragraphs] == [
        ["A title across both columns"],
        ["left 0", "left 1", "left 2", "left 3"],
        ["right 0", "right 1", "right 2", "right 3"],
    ]


def test_pieces_of_one_line_are_joined_and_a_wide_gap_starts_a_paragraph():
    pieces = [
        OcrLine("Total", (100, 100, 200, 130), 0.9),
        OcrLine("due", (220, 102, 300, 131), 0.8),
        OcrLine("Next paragraph", (100, 240, 400, 270), 0.9),
    ]
    paragraphs = _reading_order(pieces, width=1000)
    assert [[line.text for line in paragraph] for paragraph in paragraphs] == [["Total due"], ["Next paragraph"]]
    assert paragraphs[0][0].box == (100, 100, 300, 131)


def test_ocr_in_a_parse_child_reads_with_an_engine_of_its_own_and_the_time_ocr_adds(settings):
    settings.KB_PARSE_TIMEOUT_S = 1  # far too short for loading an engine and reading a line...
    settings.KB_OCR_PAGE_TIMEOUT_S = 120  # ...which each image read adds to
    settings.KB_PARSE_MEMORY_MB = 2048
    ocr_image(_rendered(), engine="rapidocr")  # this process's engine: a child must not use it
    text = sandbox.parse_isolated(lambda: ocr_image(_rendered(), engine="rapidocr").text, name="scan.png")
    assert text == SENTENCE


def _sleeping_parse(*, pages: int, seconds: float):
    """A parse that OCRs ``pages`` pages (the time they add, each ``KB_OCR_PAGE_TIMEOUT_S``) and
    then waits ``seconds``."""

    def parse():
        for _ in range(pages):
            sandbox.parse_time_extend(django_settings.KB_OCR_PAGE_TIMEOUT_S)
        time.sleep(seconds)
        return "read"

    return parse


def test_the_wall_time_limit_grows_by_the_time_each_ocr_page_adds_up_to_the_page_budget(settings):
    settings.KB_PARSE_TIMEOUT_S = 1  # the parent waits 1 s + 2 s of grace
    settings.KB_OCR_PAGE_TIMEOUT_S = 2
    settings.KB_OCR_MAX_PAGES = 2  # at most 4 s more
    with pytest.raises(InvalidInput) as raised:
        sandbox.parse_isolated(_sleeping_parse(pages=0, seconds=3.5), name="plain.pdf")
    assert raised.value.code == "parse_timeout" and "longer than 1 s" in raised.value.message
    assert sandbox.parse_isolated(_sleeping_parse(pages=2, seconds=3.5), name="scan.pdf") == "read"
    with pytest.raises(InvalidInput) as raised:  # ten pages ask for 20 s; the budget gives 4
        sandbox.parse_isolated(_sleeping_parse(pages=10, seconds=8), name="long-scan.pdf")
    assert raised.value.code == "parse_timeout" and "longer than 5 s" in raised.value.message


def _busy_parse(*, extend: int, cpu_seconds: float):
    def parse():
        sandbox.parse_time_extend(extend)
        used = resource.getrusage(resource.RUSAGE_SELF)
        start = used.ru_utime + used.ru_stime
        while True:
            used = resource.getrusage(resource.RUSAGE_SELF)
            if used.ru_utime + used.ru_stime - start >= cpu_seconds:
                return "read"

    return parse


def test_the_cpu_time_limit_grows_by_the_time_ocr_adds(settings):
    settings.KB_PARSE_TIMEOUT_S = 1
    settings.KB_OCR_PAGE_TIMEOUT_S = 1
    settings.KB_OCR_MAX_PAGES = 20  # wall time to spare on a busy machine
    with pytest.raises(InvalidInput) as raised:
        sandbox.parse_isolated(_busy_parse(extend=0, cpu_seconds=1.5), name="plain.pdf")
    assert raised.value.code == "parse_timeout"
    assert sandbox.parse_isolated(_busy_parse(extend=20, cpu_seconds=1.5), name="scan.pdf") == "read"


def test_inside_ocr_deferred_reading_an_image_raises_ocr_deferred_unless_ocr_is_off(settings):
    with ocr_deferred(), pytest.raises(OcrDeferred):
        ocr_image(_rendered())
    settings.KB_OCR_ENGINE = "off"
    with ocr_deferred(), pytest.raises(OcrUnavailable):
        ocr_image(_rendered())
    with ocr_deferred(False):
        settings.KB_OCR_ENGINE = "rapidocr"
        assert ocr_image(_rendered()).text == SENTENCE


# KB_OCR_QUEUE ----------------------------------------------------------------------------------


@pytest.fixture
def ocr_queue(job_queue):  # noqa: F811
    """The name of a queue of its own on the real local Redis, emptied afterwards."""
    name = f"{job_queue}-ocr-{uuid.uuid4().hex[:6]}"
    yield name
    redis.Redis.from_url(BROKER).delete(name)


@pytest.fixture
def engine(settings):
    """The default engine where it is installed (Tesseract), else RapidOCR with the memory it needs."""
    if shutil.which("tesseract") is None:
        settings.KB_OCR_ENGINE, settings.KB_PARSE_MEMORY_MB = "rapidocr", 2048
    return settings.KB_OCR_ENGINE


def _queued(name: str) -> int:
    return redis.Redis.from_url(BROKER).llen(name)


def test_with_an_ocr_queue_a_job_whose_pdf_needs_ocr_is_requeued_there_once_and_read_with_ocr(
    tenant,
    settings,
    tmp_path,
    job_queue,  # noqa: F811
    ocr_queue,
    engine,
    django_capture_on_commit_callbacks,
):
    settings.KB_DATA_DIR, settings.KB_OCR_QUEUE = tmp_path, ocr_queue
    with django_capture_on_commit_callbacks(execute=True):
        job = upload_ingest(tenant=tenant, source_name="scans", file_name="claims.pdf", data=_scanned_pdf(), options={})
    assert (_queued(job_queue), _queued(ocr_queue)) == (1, 0)

    with django_capture_on_commit_callbacks(execute=True):  # an ordinary worker takes it
        job = ingestion_job_run(job_id=job.pk, worker_id="cpu/1")
    assert (job.status, job.attempts, job.options["ocr"]) == ("pending", 0, True)
    assert (_queued(job_queue), _queued(ocr_queue)) == (1, 1)
    assert not Document.objects.for_tenant(tenant).exists()

    with django_capture_on_commit_callbacks(execute=True):  # an OCR worker takes it
        job = ingestion_job_run(job_id=job.pk, worker_id="ocr/1")
    assert (job.status, job.attempts, job.worker_id) == ("done", 1, "ocr/1"), job.error
    assert _queued(ocr_queue) == 1  # nothing queued again
    document = Document.objects.for_tenant(tenant).get()
    assert SENTENCE in document.versions.get().text
    assert document.metadata["ocr_pages"] == [1]


def test_with_an_ocr_queue_a_job_whose_file_needs_no_ocr_is_read_where_it_is(
    tenant,
    settings,
    tmp_path,
    job_queue,  # noqa: F811
    ocr_queue,
    django_capture_on_commit_callbacks,
):
    settings.KB_DATA_DIR, settings.KB_OCR_QUEUE = tmp_path, ocr_queue
    data = b"# Travel policy\n\nBook trains for trips under four hours."
    with django_capture_on_commit_callbacks(execute=True):
        job = upload_ingest(tenant=tenant, source_name="docs", file_name="travel.md", data=data, options={})
        job = ingestion_job_run(job_id=job.pk, worker_id="cpu/1")
    assert job.status == "done" and "ocr" not in job.options
    assert _queued(ocr_queue) == 0


def test_a_job_for_ocr_whose_worker_died_is_requeued_on_the_ocr_queue(
    tenant,
    settings,
    tmp_path,
    job_queue,  # noqa: F811
    ocr_queue,
    django_capture_on_commit_callbacks,
):
    from datetime import timedelta

    from django.utils import timezone

    settings.KB_DATA_DIR, settings.KB_OCR_QUEUE = tmp_path, ocr_queue
    with django_capture_on_commit_callbacks(execute=False):
        job = upload_ingest(tenant=tenant, source_name="scans", file_name="claims.pdf", data=_scanned_pdf(), options={})
    IngestionJob.objects.filter(pk=job.pk).update(
        status="running",
        worker_id="ocr/dead",
        options={"ocr": True},
        lease_expires_at=timezone.now() - timedelta(seconds=1),
    )
    with django_capture_on_commit_callbacks(execute=True):
        assert ingestion_jobs_recover() == [job.pk]
    assert (_queued(job_queue), _queued(ocr_queue)) == (0, 1)


def test_without_an_ocr_queue_a_scanned_pdf_is_read_with_ocr_in_its_own_job(
    tenant, settings, tmp_path, engine, django_capture_on_commit_callbacks
):
    settings.KB_DATA_DIR, settings.KB_OCR_QUEUE = tmp_path, ""
    with django_capture_on_commit_callbacks(execute=True):  # no broker: the job runs at commit
        job = upload_ingest(tenant=tenant, source_name="scans", file_name="claims.pdf", data=_scanned_pdf(), options={})
    job.refresh_from_db()
    assert (job.status, job.attempts) == ("done", 1), job.error
    assert "ocr" not in job.options
    assert SENTENCE in Document.objects.for_tenant(tenant).get().versions.get().text
