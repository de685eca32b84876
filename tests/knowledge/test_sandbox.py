"""The parse sandbox: a forked child with its own memory and CPU limits, whose result or error
comes back through a pipe (knowledge.ingestion.sandbox)."""

import json
import logging
import os
import signal
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

import pytest

from core.errors import InvalidInput, UnsupportedFileType
from knowledge.ingestion import sandbox
from knowledge.ingestion.documents import ReadDocument, Section
from knowledge.ingestion.readers import read_bytes
from tests.knowledge.test_office_readers import make_docx
from tests.security.attack_files import pdf_of_texts

ROOT = Path(__file__).resolve().parents[2]


def test_a_parse_in_the_child_returns_its_documents_to_the_parent():
    document = ReadDocument(
        external_id="a",
        title="Title",
        text="Title\n\nBody",
        sections=[Section(heading="Title", start=0)],
        published_at=datetime(2025, 1, 2, tzinfo=UTC),
        metadata={"pages": 3},
    )
    assert sandbox.parse_isolated(lambda: [document], name="a.pdf") == [document]


def test_the_child_is_another_process_and_leaves_no_zombie():
    pid = sandbox.parse_isolated(os.getpid, name="a.pdf")
    assert pid != os.getpid()
    with pytest.raises(ChildProcessError):
        os.waitpid(pid, os.WNOHANG)  # already reaped


def test_an_application_error_raised_in_the_child_comes_back_with_its_code_and_message():
    def refuse():
        raise InvalidInput("a.pdf: the PDF has 3,000 pages; the limit is 2,000.", code="document_too_large")

    with pytest.raises(InvalidInput) as caught:
        sandbox.parse_isolated(refuse, name="a.pdf")
    assert caught.value.code == "document_too_large"
    assert caught.value.message == "a.pdf: the PDF has 3,000 pages; the limit is 2,000."

    def unsupported():
        raise UnsupportedFileType("a.xyz: unsupported file type .xyz.")

    with pytest.raises(UnsupportedFileType):
        sandbox.parse_isolated(unsupported, name="a.xyz")


def test_a_library_error_in_the_child_is_a_parse_failure_naming_the_file():
    def broken():
        raise KeyError("/Root")

    with pytest.raises(InvalidInput, match=r"^a\.pdf: the file could not be read \(KeyError\)") as caught:
        sandbox.parse_isolated(broken, name="a.pdf")
    assert caught.value.code == "parse_failed"


def test_a_parse_that_allocates_past_the_memory_limit_is_document_too_large(settings):
    settings.KB_PARSE_MEMORY_MB = 64
    with pytest.raises(InvalidInput, match=r"needs more than 64 MB of memory") as caught:
        sandbox.parse_isolated(lambda: len(bytearray(200 * 2**20)), name="big.docx")
    assert caught.value.code == "document_too_large"
    assert sandbox.parse_isolated(lambda: len(bytearray(16 * 2**20)), name="small.docx") == 16 * 2**20


def test_a_parse_that_spins_past_the_cpu_limit_is_killed_and_is_a_parse_timeout(settings):
    settings.KB_PARSE_TIMEOUT_S = 1
    started = time.monotonic()
    with pytest.raises(InvalidInput, match=r"^spin\.pdf: reading the file took longer than 1 s") as caught:
        sandbox.parse_isolated(lambda: [n for n in iter(int, 1)], name="spin.pdf")
    assert caught.value.code == "parse_timeout"
    assert time.monotonic() - started < 1 + sandbox.GRACE_S + 2


def test_a_parse_that_sleeps_past_the_wall_time_limit_is_killed_and_is_a_parse_timeout(settings):
    settings.KB_PARSE_TIMEOUT_S = 1
    started = time.monotonic()
    with pytest.raises(InvalidInput) as caught:
        sandbox.parse_isolated(lambda: time.sleep(60), name="stuck.pdf")  # no CPU: only the wall clock stops it
    assert caught.value.code == "parse_timeout"
    assert time.monotonic() - started < 1 + sandbox.GRACE_S + 2


def test_a_child_that_crashes_is_a_parse_failure_saying_how():
    with pytest.raises(InvalidInput, match=r"stopped unexpectedly \(signal SIGSEGV\)") as caught:
        sandbox.parse_isolated(lambda: os.kill(os.getpid(), signal.SIGSEGV), name="crash.pdf")
    assert caught.value.code == "parse_failed"


def test_a_child_killed_from_outside_not_for_cpu_is_taken_for_memory():
    with pytest.raises(InvalidInput) as caught:
        sandbox.parse_isolated(lambda: os.kill(os.getpid(), signal.SIGKILL), name="oom.pdf")
    assert caught.value.code == "document_too_large"


def test_a_reply_holding_anything_but_documents_errors_and_dates_is_refused_by_the_parent():
    with pytest.raises(InvalidInput) as caught:
        sandbox.parse_isolated(lambda: logging.getLogger("x"), name="odd.pdf")  # a class not on the allow-list
    assert caught.value.code == "parse_failed"


def test_the_child_closes_the_file_descriptors_it_inherited(tmp_path):
    with open(tmp_path / "secret.txt", "w") as secret:
        fd = secret.fileno()

        def probe():
            try:
                os.fstat(fd)
            except OSError:
                return "closed"
            return "open"

        assert sandbox.parse_isolated(probe, name="a.pdf") == "closed"
        os.fstat(fd)  # still open here


# The child's report, from a small parent process of its own: in a test worker that has run hundreds
# of tests before, the child's peak resident memory from the kernel (ru_maxrss) has been seen not
# to rise with a 50 MB write.
_CHILD_REPORT = """
import json, logging, django
django.setup()
from knowledge.ingestion import sandbox
records = []
handler = logging.Handler()
handler.emit = records.append
logger = logging.getLogger("knowledge.ingestion.sandbox")
logger.setLevel(logging.DEBUG)
logger.addHandler(handler)
sandbox.parse_isolated(lambda: len(b"x" * (50 * 2**20)), name="a.pdf")  # written: resident
[record] = records
print(json.dumps({"peak": record.child_peak_rss_kb, "start": record.child_start_rss_kb, "wall": record.parse_wall_s}))
"""


def test_the_child_reports_its_time_and_memory():
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "config.settings", "KB_DATABASE_ROLE": "owner"}
    run = subprocess.run(
        [sys.executable, "-c", _CHILD_REPORT], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120
    )
    assert run.returncode == 0, run.stderr[-2000:]
    record = json.loads(run.stdout.strip().splitlines()[-1])
    grew_mb = (record["peak"] - record["start"]) / 1024
    assert 45 < grew_mb < 200
    assert record["wall"] < 10


def test_pdf_office_rst_and_html_files_are_read_in_the_child_and_the_linear_formats_in_this_process(
    tmp_path, monkeypatch
):
    calls = []
    real = sandbox.parse_isolated
    monkeypatch.setattr(sandbox, "parse_isolated", lambda parse, **kw: calls.append(kw["name"]) or real(parse, **kw))
    assert read_bytes(pdf_of_texts(["Quarterly travel policy"]), name="policy.pdf")[0].text == "Quarterly travel policy"
    assert read_bytes(make_docx(tmp_path / "travel.docx").read_bytes(), name="travel.docx")[0].title == "Travel policy"
    assert read_bytes(b"Notes\n=====\n\nSee :class:`Field`.", name="notes.rst")[0].text == "Notes\n\nSee Field."
    assert read_bytes(b"Notes\n=====\n\nPlain.", name="notes.txt", fmt="rst")[0].title == "Notes"
    assert read_bytes(b"<h1>Notes</h1><p>Plain.</p>", name="notes.html")[0].title == "Notes"
    assert read_bytes(b"# Notes\n\nPlain text.", name="notes.md")[0].title == "Notes"
    assert read_bytes(b"Notes\n\nPlain text.", name="notes.txt")[0].title == "Notes"
    assert read_bytes(b'{"text": "Plain text."}', name="notes.jsonl")[0].text == "Plain text."
    assert calls == ["policy.pdf", "travel.docx", "notes.rst", "notes.txt", "notes.html"]


def test_a_parse_that_runs_out_of_memory_while_holding_its_tree_is_too_large(settings):
    # docutils' tree is still held while its MemoryError unwinds: not even the error could be
    # made then, so the child had sent nothing ("parse_failed").
    settings.KB_PARSE_MEMORY_MB = 64
    data = "".join(f"x :r{i}:`t`\n\n" for i in range(100_000)).encode()
    with pytest.raises(InvalidInput) as caught:
        read_bytes(data, name="roles.rst")
    assert caught.value.code == "document_too_large"


def test_a_date_in_a_named_time_zone_comes_back_from_the_child():
    from zoneinfo import ZoneInfo

    when = datetime(2025, 4, 2, tzinfo=ZoneInfo("Europe/Paris"))
    assert sandbox.parse_isolated(lambda: when, name="notes.rst") == when


def test_a_parse_in_the_child_that_reads_again_reads_in_the_same_child():
    parent = os.getpid()
    # A page read as Markdown inside the child: the inner call does not fork a grandchild.
    pids = sandbox.parse_isolated(lambda: (os.getpid(), sandbox.parse_isolated(os.getpid, name="inner")), name="outer")
    assert pids[0] == pids[1] != parent
