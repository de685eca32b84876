"""Every text reader's time grows at most linearly with its input, also for shapes built to make a
regular expression or a parser backtrack: long runs of ``#``, spaces, backticks and colons,
role-like ``:a-:a-…`` and ``:a:b:c…`` chains, ``.. `` lines, unclosed tags, runs of combining
marks.

Each shape is read at four sizes, n, 2n, 4n and 8n, n chosen so that the smallest read is long
enough to measure (it doubles from a small start until one read takes ``MEASURABLE_S``). The
reader runs in this process (the parse sandbox bypassed) and is timed on CPU time, the best of a
few reads; ``time(8n) / time(n)`` must stay below 8 x 2.5, with ``time(n)`` taken as at least
``FLOOR_S`` so that sub-millisecond noise cannot fail a reader. A read that takes more than
``GIVE_UP_S`` ends the shape at once: linear readers are far from it.

Two reST shapes are super-linear in docutils itself and are not here: many sibling sections
(docutils copies the rest of the document for each) and inline markup in one very long paragraph
(it copies the rest of the paragraph after each). reST is parsed in the sandbox, whose CPU limit
ends those: ``test_a_pathological_rst_file_is_stopped_by_the_sandbox_time_limit``.
"""

from __future__ import annotations

import gc
import json
import time
from collections.abc import Callable

import pytest

from core.errors import InvalidInput
from knowledge.connectors.web import page_read
from knowledge.ingestion import sandbox
from knowledge.ingestion.readers import read_bytes

# The largest ratio time(8n) / time(n) accepted: linear is 8; 2.5 times that allows for noise.
MAX_RATIO = 8 * 2.5
# The smallest read's time the calibration looks for, and the size it starts from.
MEASURABLE_S = 0.01
# The smallest time(n) a ratio is taken against (a reader still under MEASURABLE_S at the largest
# start size is measured against it), so that noise and cache effects on a read of a few ms fail
# nothing: a quadratic reader's 8n still takes 64 times that, past MAX_RATIO.
FLOOR_S = MEASURABLE_S
START_CHARS = 500
# The size the calibration stops at even if reads stay faster than MEASURABLE_S.
MAX_START_CHARS = 2**20
# One read this slow is not linear (linear readers read 8n here in well under a second).
GIVE_UP_S = 3.0

PAGE = "<html><head><title>T</title></head><body><article>%s</article></body></html>"


def _repeat(unit: str, n: int) -> str:
    return unit * max(1, n // len(unit))


# (reader, shape, text of about n characters)
SHAPES: list[tuple[str, str, Callable[[int], str]]] = [
    ("md", "a heading with a run of spaces and tabs", lambda n: "# a" + _repeat(" \t", n) + "x"),
    ("md", "a heading of hashes", lambda n: "# " + "#" * n + "x"),
    ("md", "headings of hashes and spaces", lambda n: _repeat("## # # # # #x\n", n)),
    ("md", "many headings", lambda n: _repeat("## Heading\n\nSome text.\n\n", n)),
    ("md", "fence markers", lambda n: _repeat("```\n", n)),
    ("rst", "a role-like chain on one line", lambda n: "x " + _repeat(":a-", n)),
    ("rst", "an :a:b:c chain on one line", lambda n: "x :" + _repeat("a:", n) + "`t`"),
    ("rst", "role-like chains on many lines", lambda n: _repeat("x " + ":a-" * 300 + "\n\n", n)),
    ("rst", "blank lines", lambda n: "x\n" + "\n" * n),
    ("rst", "lines of spaces", lambda n: "x\n" + _repeat(" \n", n)),
    ("rst", "directive-like lines", lambda n: _repeat(".. " * 30 + "\n\n", n)),
    ("rst", "unknown directives", lambda n: "".join(f".. d{i}:: x\n\n" for i in range(max(1, n // 14)))),
    ("rst", "unknown roles", lambda n: "".join(f"x :r{i}:`t`\n\n" for i in range(max(1, n // 14)))),
    ("rst", "runs of backticks", lambda n: _repeat("x " + "`" * 200 + "\n\n", n)),
    ("rst", "runs of colons", lambda n: _repeat("x " + ":" * 200 + "\n\n", n)),
    ("html", "unclosed tags", lambda n: _repeat("<a", n)),
    ("html", "end-tag openers", lambda n: _repeat("</", n)),
    ("html", "processing-instruction openers", lambda n: _repeat("<?", n)),
    ("html", "headings split by inline tags", lambda n: _repeat("<h2>a<b>b</b></h2><p>text</p>", n)),
    ("html", "paragraphs", lambda n: _repeat("<p>Some sentence.</p>", n)),
    ("txt", "combining marks out of order", lambda n: "a" + _repeat("\u0301\u0316", n)),
    ("txt", "lines", lambda n: _repeat("Some words on a line.\n", n)),
    ("jsonl", "combining marks in a text field", lambda n: json.dumps({"text": "a" + _repeat("\u0301\u0316", n)})),
    ("jsonl", "many lines", lambda n: _repeat('{"text": "Some words."}\n', n)),
    ("page", "a heading of hashes", lambda n: PAGE % ("<h2>" + "#" * n + "x</h2><p>Some text.</p>")),
    ("page", "combining marks", lambda n: PAGE % ("<p>a" + _repeat("\u0301\u0316", n) + "</p>")),
    ("page", "paragraphs", lambda n: PAGE % _repeat("<p>Some sentence of text.</p>", n)),
]

READERS: dict[str, Callable[[str], object]] = {
    "md": lambda text: read_bytes(text.encode(), name="notes.md"),
    "rst": lambda text: read_bytes(text.encode(), name="notes.rst"),
    "html": lambda text: read_bytes(text.encode(), name="page.html"),
    "txt": lambda text: read_bytes(text.encode(), name="notes.txt"),
    "jsonl": lambda text: read_bytes(text.encode(), name="docs.jsonl"),
    "page": lambda text: page_read(text.encode(), url="https://example.com/docs/page.html"),
}


def _read_cpu_s(read: Callable[[str], object], text: str, *, repeats: int = 2) -> float:
    """The best CPU time of up to ``repeats`` reads of ``text`` (one if it is slow enough to
    measure)."""
    best = float("inf")
    for _ in range(repeats):
        gc.collect()  # the reads before left garbage; the test's own objects are frozen
        start = time.process_time()
        try:
            read(text)
        except InvalidInput:  # e.g. nothing left to read: the time is what counts
            pass
        spent = time.process_time() - start
        best = min(best, spent)
        if spent > 5 * MEASURABLE_S:
            break
    return best


def _growth(read: Callable[[str], object], make: Callable[[int], str]) -> tuple[list[tuple[int, float]], str]:
    """[(size in characters, CPU seconds)] at n, 2n, 4n, 8n, and why it stopped early (or "")."""
    _read_cpu_s(read, make(START_CHARS), repeats=1)  # the first read imports the reader's libraries
    n = START_CHARS
    while n < MAX_START_CHARS and _read_cpu_s(read, make(n), repeats=1) < MEASURABLE_S:
        n *= 2
    times = []
    for size in (n, 2 * n, 4 * n, 8 * n):
        text = make(size)
        spent = _read_cpu_s(read, text)
        times.append((len(text), spent))
        if spent > GIVE_UP_S:
            return times, f"one read took {spent:.1f} s"
    return times, ""


@pytest.fixture
def in_this_process(monkeypatch):
    """Readers that run in the sandbox run here instead, so that their CPU time is this process's.

    The test process's objects are frozen first, as the sandbox's child freezes its parent's: the
    garbage collector's passes then walk the reader's objects, not the whole test run's.
    """
    monkeypatch.setattr(sandbox, "parse_isolated", lambda parse, **kwargs: parse())
    gc.collect()
    gc.freeze()
    yield
    gc.unfreeze()


@pytest.mark.parametrize(("reader", "shape", "make"), SHAPES, ids=[f"{r}: {s}" for r, s, _ in SHAPES])
def test_reading_time_grows_at_most_linearly(reader, shape, make, in_this_process):
    times, stopped = _growth(READERS[reader], make)
    table = ", ".join(f"{size:,} chars {spent * 1000:.1f} ms" for size, spent in times)
    print(f"{reader}: {shape}: {table}")
    assert not stopped, f"{reader}, {shape}: {stopped} ({table})"
    ratio = times[-1][1] / max(times[0][1], FLOOR_S)
    assert ratio < MAX_RATIO, f"{reader}, {shape}: 8x the size took {ratio:.1f}x the time ({table})"


def test_a_pathological_rst_file_is_stopped_by_the_sandbox_time_limit(settings):
    """20 MB of sibling sections, the upload limit: docutils copies the rest of the document for
    each section (hours for this file); the child's CPU limit ends the parse."""
    settings.KB_PARSE_TIMEOUT_S = 1
    data = "".join(f"Title {i}\n{'=' * 12}\n\nText.\n\n" for i in range(720_000)).encode()
    assert len(data) > 20 * 10**6

    with pytest.raises(InvalidInput) as caught:
        read_bytes(data, name="sections.rst")

    assert caught.value.code == "parse_timeout"
    assert caught.value.message.startswith("sections.rst: reading the file took longer than 1 s, the limit")
