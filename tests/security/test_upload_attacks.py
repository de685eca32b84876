"""Uploads built to exhaust the server, each refused quickly with a clear 4xx (or a failed job with
its code and reason), nothing stored, the web (test) process grown by at most 300 MB and a parse
child by at most its limit. Each guard also has a companion test that switches it off (a cap
lifted, the sandbox bypassed, the upload handler removed) and shows the same attack then gets
through, or lasts or grows more: so the test of the guard can fail.

The attacks (generated here, small on disk):

| upload | guard |
|---|---|
| a .docx whose document.xml inflates to 200 MB | the zip's declared sizes, checked in the request |
| a .docx of 200 MB of one-letter paragraphs | the same |
| a PDF whose 20 pages share one 10 MB content stream | the PDF stream caps, in the job's parse child |
| a PDF with a 60 MB content stream | the same (pypdf's own errors are 4xx too) |
| a 200 MB text file | the upload handler: refused by its Content-Length, the body never read |
| a .docx whose hidden part builds a large tree in the parser | the sandbox: the parent does not grow |
"""

from __future__ import annotations

import io
import json
import logging
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.test.client import ClientHandler, RequestFactory

from knowledge.ingestion.readers import read_bytes
from knowledge.models import Document, IngestionJob
from tests.knowledge.test_office_readers import make_docx
from tests.security.attack_files import (
    MemoryWatch,
    MiB,
    docx_inflating_to,
    docx_of_one_letter_paragraphs,
    docx_with_a_hidden_tree,
    pdf,
    pdf_sharing_one_stream,
    text_stream,
)
from tests.security.probe_table import probe_record

# What every attack must stay within.
MAX_SECONDS = 30
MAX_WEB_GROWTH_MB = 300
LIFTED = 10**9


@pytest.fixture(scope="module")
def base_docx(tmp_path_factory) -> Path:
    return make_docx(tmp_path_factory.mktemp("docx") / "travel.docx")


@pytest.fixture(scope="module")
def inflating_docx(base_docx) -> bytes:
    return docx_inflating_to(200 * MiB, base=base_docx)


@pytest.fixture(scope="module")
def one_letter_docx(base_docx) -> bytes:
    return docx_of_one_letter_paragraphs(200 * MiB, base=base_docx)


@pytest.fixture(scope="module")
def shared_stream_pdf() -> bytes:
    return pdf_sharing_one_stream(pages=20, stream_size=10 * MiB)


@pytest.fixture(scope="module")
def big_stream_pdf() -> bytes:
    return pdf([0], {0: text_stream(60 * MiB)})


@dataclass
class Outcome:
    """What one upload did: the response, the job if one was made, time, memory, the parse children."""

    status: int
    body: dict
    job: IngestionJob | None
    seconds: float
    web_growth_mb: float
    children: list[logging.LogRecord] = field(default_factory=list)

    @property
    def code(self) -> str:
        """The refusal's code: the response's, or the failed job's."""
        if self.job is not None:
            return (self.job.result or {}).get("error_code", "")
        return self.body.get("error", {}).get("code", "")

    @property
    def message(self) -> str:
        return self.job.error if self.job is not None else self.body.get("error", {}).get("message", "")

    @property
    def child_growth_mb(self) -> float:
        return max(((r.child_peak_rss_kb - r.child_start_rss_kb) / 1024 for r in self.children), default=0.0)


class _Records(logging.Handler):
    def __init__(self):
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


@contextmanager
def parse_children() -> Iterator[list[logging.LogRecord]]:
    """The sandbox's report of each parse child (time, CPU, memory) while the block runs. On the
    sandbox's own logger: the eager job may set up logging again, taking pytest's handlers away."""
    logger, handler = logging.getLogger("knowledge.ingestion.sandbox"), _Records()
    level = logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.DEBUG)
    try:
        yield handler.records
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)


@pytest.fixture
def attack(editor_client, django_capture_on_commit_callbacks):
    """``attack(name, data, run_job=True)``: upload through the API as an editor; the job runs as
    it does without a broker (eagerly, in this process, once the upload commits)."""

    def run(name: str, data: bytes, *, run_job: bool = True) -> Outcome:
        with parse_children() as children:
            started = time.monotonic()
            with MemoryWatch() as memory, django_capture_on_commit_callbacks(execute=run_job):
                response = editor_client.post(
                    "/api/v1/documents/", {"file": SimpleUploadedFile(name, data)}, format="multipart"
                )
            seconds = time.monotonic() - started
        body = response.json()
        job = IngestionJob.objects.get(pk=body["id"]) if response.status_code == 202 else None
        return Outcome(response.status_code, body, job, seconds, memory.growth_mb, list(children))

    return run


def assert_refused_cleanly(outcome: Outcome, *, code: str, name: str, settings, upload_dir) -> None:
    """Refused (a 4xx, or a failed job) with ``code`` and a message naming the file, in time,
    nothing stored, within the memory limits."""
    if outcome.job is not None:
        assert outcome.status == 202 and outcome.job.status == IngestionJob.Status.FAILED, outcome.job.error
        assert outcome.message.endswith("Nothing from this file was stored.")
    else:
        assert 400 <= outcome.status < 500
    assert outcome.code == code, outcome.message
    probe_record(
        attack=f"upload {name}",
        guard="on",
        outcome=f"{outcome.status} {code}" if outcome.job is None else f"{outcome.status}, job failed {code}",
        detail=outcome.message,
        seconds=round(outcome.seconds, 2),
        web_mb=round(outcome.web_growth_mb, 1),
        child_mb=round(outcome.child_growth_mb, 1),
    )
    assert outcome.message.startswith(f"{name}: ")
    assert outcome.seconds < MAX_SECONDS
    assert not Document.objects.exists()
    assert not upload_dir.exists() or not [p for p in upload_dir.rglob("*") if p.is_file()]
    assert outcome.web_growth_mb <= MAX_WEB_GROWTH_MB
    assert outcome.child_growth_mb <= settings.KB_PARSE_MEMORY_MB


# --- The zip's declared sizes (in the web request) --------------------------------------------


def test_a_docx_whose_document_inflates_to_200_mb_is_refused_as_an_archive_bomb_before_it_is_stored(
    attack, inflating_docx, settings, upload_dir
):
    outcome = attack("inflating.docx", inflating_docx)
    assert_refused_cleanly(
        outcome, code="archive_bomb", name="inflating.docx", settings=settings, upload_dir=upload_dir
    )
    assert outcome.status == 400 and outcome.job is None  # in the request: no job, no parse
    assert "unpacks to 200.8 MB, more than the limit of 100 MB" in outcome.message
    assert not outcome.children


def test_a_docx_of_200_mb_of_one_letter_paragraphs_is_refused_as_an_archive_bomb_before_it_is_stored(
    attack, one_letter_docx, settings, upload_dir
):
    outcome = attack("letters.docx", one_letter_docx)
    assert_refused_cleanly(outcome, code="archive_bomb", name="letters.docx", settings=settings, upload_dir=upload_dir)
    assert outcome.status == 400 and outcome.job is None
    assert not outcome.children


def test_with_the_zip_caps_lifted_the_inflating_docx_is_accepted_and_stored(
    attack, inflating_docx, settings, upload_dir
):
    settings.KB_PARSE_MAX_UNPACKED_MB = LIFTED
    settings.KB_PARSE_MAX_RATIO = LIFTED
    outcome = attack("inflating.docx", inflating_docx, run_job=False)
    probe_record(attack="upload inflating.docx", guard="zip caps off", outcome=f"{outcome.status} accepted, stored")
    assert outcome.status == 202  # the request no longer sees anything wrong: the job would parse 200 MB
    assert [p.name for p in upload_dir.rglob("*") if p.is_file()] == ["inflating.docx"]


# --- The PDF stream caps (in the job's parse child) ---------------------------------------------


def test_a_pdf_whose_20_pages_share_one_10_mb_content_stream_fails_its_job_as_an_archive_bomb(
    attack, shared_stream_pdf, settings, upload_dir
):
    assert len(shared_stream_pdf) < 64 * 2**10
    outcome = attack("shared.pdf", shared_stream_pdf)
    assert_refused_cleanly(outcome, code="archive_bomb", name="shared.pdf", settings=settings, upload_dir=upload_dir)
    assert "the limit is 100 times" in outcome.message
    assert len(outcome.children) == 1  # parsed once, by the job, in a child; never in the request


def test_a_pdf_with_a_60_mb_content_stream_fails_its_job_as_an_archive_bomb_not_a_500(
    attack, big_stream_pdf, settings, upload_dir
):
    outcome = attack("big.pdf", big_stream_pdf)
    assert_refused_cleanly(outcome, code="archive_bomb", name="big.pdf", settings=settings, upload_dir=upload_dir)
    assert len(outcome.children) == 1


@pytest.mark.parametrize("attack_pdf", ["shared_stream_pdf", "big_stream_pdf"])
def test_with_the_pdf_caps_lifted_the_parse_runs_until_the_time_limit_or_pypdfs_own(
    attack, request, settings, upload_dir, attack_pdf
):
    settings.KB_PARSE_MAX_UNPACKED_MB = LIFTED
    settings.KB_PARSE_MAX_RATIO = LIFTED
    settings.KB_PARSE_TIMEOUT_S = 3  # what stops it now: keep the test short
    outcome = attack(f"{attack_pdf}.pdf", request.getfixturevalue(attack_pdf))
    probe_record(
        attack=f"upload {attack_pdf}.pdf",
        guard="pdf caps off",
        outcome=f"job {outcome.job.status if outcome.job else '-'} {outcome.code}",
        seconds=round(outcome.seconds, 2),
        child_mb=round(outcome.child_growth_mb, 1),
    )
    assert outcome.job is not None and outcome.job.status == IngestionJob.Status.FAILED
    assert outcome.code in ("parse_timeout", "document_too_large")  # no longer refused at once by the caps
    assert outcome.code == "document_too_large" or outcome.seconds >= settings.KB_PARSE_TIMEOUT_S
    [child] = outcome.children
    assert child.parse_cpu_s > 1  # the caps answer in a fraction of that


# --- The upload handler (while the body streams in) ---------------------------------------------


class CountingBody(io.RawIOBase):
    """A multipart body made on the fly: a head, ``size`` bytes of text, a tail. Counts what is read
    and looks into ``temp_dir`` as it goes, for a temporary file being written."""

    BOUNDARY = "attackboundary"
    FILLER = b"All work and no play makes a dull upload. " * 1000

    def __init__(self, size: int, *, temp_dir: Path):
        self.head = (
            f'--{self.BOUNDARY}\r\nContent-Disposition: form-data; name="file"; filename="huge.txt"\r\n'
            "Content-Type: text/plain\r\n\r\n"
        ).encode()
        self.tail = f"\r\n--{self.BOUNDARY}--\r\n".encode()
        self.size, self.length = size, len(self.head) + size + len(self.tail)
        self.read_bytes = 0
        self.temp_dir = temp_dir
        self.temp_files_seen = 0

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        position, file_end = self.read_bytes, len(self.head) + self.size
        if position < len(self.head):
            chunk = self.head[position:]
        elif position < file_end:
            offset = (position - len(self.head)) % len(self.FILLER)
            chunk = self.FILLER[offset : offset + file_end - position]
        else:
            chunk = self.tail[position - file_end :]
        n = min(len(buffer), len(chunk))
        buffer[:n] = chunk[:n]
        self.read_bytes += n
        self.temp_files_seen = max(self.temp_files_seen, len(list(self.temp_dir.iterdir())))
        return n


@pytest.fixture
def streamed_upload(editor_client, settings, tmp_path):
    """``streamed_upload(size)``: POST a ``size``-byte text file to the API through Django's
    request handler (CSRF checks on, as in production), its body read from a ``CountingBody``.
    Returns (status, the JSON answer, the body, seconds, how much this process grew in MB)."""
    temp_dir = tmp_path / "upload-temp"
    temp_dir.mkdir()
    settings.FILE_UPLOAD_TEMP_DIR = str(temp_dir)
    token = editor_client._credentials["HTTP_AUTHORIZATION"]

    def post(size: int):
        body = CountingBody(size, temp_dir=temp_dir)
        environ = RequestFactory()._base_environ(
            PATH_INFO="/api/v1/documents/",
            REQUEST_METHOD="POST",
            CONTENT_TYPE=f"multipart/form-data; boundary={CountingBody.BOUNDARY}",
            CONTENT_LENGTH=str(body.length),
            HTTP_AUTHORIZATION=token,
        )
        environ["wsgi.input"] = io.BufferedReader(body)
        with MemoryWatch() as memory:
            started = time.monotonic()
            response = ClientHandler(enforce_csrf_checks=True)(environ)
            seconds = time.monotonic() - started
        return response.status_code, json.loads(response.content), body, seconds, memory.growth_mb

    return post


def test_a_200_mb_text_upload_is_refused_by_its_length_before_its_body_is_read(
    streamed_upload, settings, upload_dir, tmp_path
):
    status, answer, body, seconds, growth_mb = streamed_upload(200 * MiB)
    probe_record(
        attack="upload of a 200 MB text file",
        guard="on",
        outcome=f"{status} {answer['error']['code']} after {body.read_bytes:,} bytes read",
        detail=answer["error"]["message"],
        seconds=round(seconds, 2),
        web_mb=round(growth_mb, 1),
    )
    assert status == 413
    error = answer["error"]
    assert error["code"] == "payload_too_large"
    assert error["message"] == (
        "The upload is 200.0 MB; the limit for one upload is 100 MB. Send fewer or smaller files at a time."
    )
    assert body.read_bytes < 256 * 2**10  # of 200 MB: the multipart head and the first pieces at most
    assert body.temp_files_seen == 0 and not any((tmp_path / "upload-temp").iterdir())
    assert seconds < MAX_SECONDS and growth_mb <= MAX_WEB_GROWTH_MB
    assert not Document.objects.exists() and not IngestionJob.objects.exists()
    assert not upload_dir.exists()


def test_a_file_past_the_per_file_limit_is_stopped_as_soon_as_it_passes_it(
    streamed_upload, settings, upload_dir, tmp_path
):
    settings.KB_MAX_UPLOAD_BYTES = 1 * MiB  # the request (60 MB) is under its own limit: the file's stops it
    status, answer, body, seconds, growth_mb = streamed_upload(60 * MiB)
    assert status == 413 and seconds < MAX_SECONDS and growth_mb <= MAX_WEB_GROWTH_MB
    assert answer["error"] == {
        "code": "payload_too_large",
        "message": "huge.txt: the file is larger than 1 MB (the limit for one file).",
    }
    assert body.read_bytes < 2 * MiB  # of 60 MB
    assert not any((tmp_path / "upload-temp").iterdir())  # the 1 MB spooled so far is deleted with it
    assert not IngestionJob.objects.exists() and not upload_dir.exists()


def test_without_the_upload_handler_the_whole_body_is_read_and_spooled_to_a_temporary_file(
    streamed_upload, settings, upload_dir
):
    settings.FILE_UPLOAD_HANDLERS = [h for h in settings.FILE_UPLOAD_HANDLERS if not h.startswith("core.uploads")]
    status, _answer, body, seconds, growth = streamed_upload(50 * MiB)
    probe_record(
        attack="upload of a 50 MB text file",
        guard="handler off",
        outcome=f"{status} after all {body.read_bytes:,} bytes read and spooled to disk",
        seconds=round(seconds, 2),
        web_mb=round(growth, 1),
    )
    assert status == 413  # the service still refuses the file, but only after...
    assert body.read_bytes == body.length  # ...every byte was received
    assert body.temp_files_seen == 1  # and written to disk


# --- The sandbox (the parse's memory is the child's) ---------------------------------------------


def test_a_docx_whose_hidden_part_builds_a_large_tree_costs_the_parse_child_not_the_web_process(base_docx, settings):
    data = docx_with_a_hidden_tree(8 * MiB, base=base_docx)  # 240,000 paragraphs in a content control
    settings.KB_PARSE_MAX_RATIO = LIFTED  # what is measured here is the parse, not the request's caps
    with MemoryWatch() as memory:
        [document] = read_bytes(data, name="hidden.docx")
    assert document.text == "Visible text of the document."
    assert memory.growth_mb < 20  # the child's memory limit itself: tests/knowledge/test_sandbox.py


# Run in a fresh interpreter: a long test session keeps freed memory resident, which a parse in
# this process could reuse without the peak moving. Prints the peak growth in MB and the text.
_PARSE_IN_PROCESS = """
import sys
sys.path.insert(0, ".")
import django
django.setup()
from knowledge.ingestion import sandbox
from knowledge.ingestion.readers import read_bytes
from tests.security.attack_files import MemoryWatch

sandbox.parse_isolated = lambda parse, **kwargs: parse()  # the sandbox bypassed
data = open(sys.argv[1], "rb").read()
with MemoryWatch() as memory:
    [document] = read_bytes(data, name="hidden.docx")
print(round(memory.growth_mb), document.text)
"""


def test_without_the_sandbox_the_same_docx_grows_the_web_process(base_docx, tmp_path):
    path = tmp_path / "hidden.docx"
    path.write_bytes(docx_with_a_hidden_tree(8 * MiB, base=base_docx))
    environment = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "config.settings",
        "DATABASE_URL": "postgresql://nobody@127.0.0.1:1/none",  # never connected to
        "KB_PARSE_MAX_RATIO": str(LIFTED),
    }
    result = subprocess.run(
        [sys.executable, "-c", _PARSE_IN_PROCESS, str(path)],
        cwd=Path(__file__).resolve().parents[2],
        env=environment,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    growth_mb, text = result.stdout.strip().split(" ", 1)
    assert text == "Visible text of the document."  # it gets through, and the parse's memory is ours:
    assert int(growth_mb) > 64
