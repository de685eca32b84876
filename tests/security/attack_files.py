"""Files built to exhaust a server that reads them, made on the fly (small on disk, huge unpacked),
and the helpers that measure what reading them cost: this process's resident memory and its peak.
"""

from __future__ import annotations

import io
import zipfile
import zlib
from dataclasses import dataclass
from pathlib import Path

MiB = 2**20

_WORD_NS = "http://schemas.openxmlformats.org/wordprocessingml/2006/main"
_DOCUMENT_HEAD = (
    f'<?xml version="1.0" encoding="UTF-8" standalone="yes"?>\n<w:document xmlns:w="{_WORD_NS}"><w:body>'.encode()
)
_DOCUMENT_TAIL = b"</w:body></w:document>"


def _docx_around(document_xml_chunks, base: Path) -> bytes:
    """A real .docx (``base``, made by python-docx) whose ``word/document.xml`` is written from
    ``document_xml_chunks`` (an iterable of bytes), deflated as it streams."""
    out = io.BytesIO()
    with zipfile.ZipFile(base) as source, zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as target:
        for member in source.infolist():
            if member.filename != "word/document.xml":
                target.writestr(member, source.read(member))
        info = zipfile.ZipInfo("word/document.xml")
        info.compress_type = zipfile.ZIP_DEFLATED
        with target.open(info, "w", force_zip64=True) as document:
            for chunk in document_xml_chunks:
                document.write(chunk)
    return out.getvalue()


def docx_inflating_to(size: int, *, base: Path) -> bytes:
    """A .docx whose document.xml inflates to ``size`` bytes: one paragraph of one long repeated string."""
    head = _DOCUMENT_HEAD + b"<w:p><w:r><w:t>"
    tail = b"</w:t></w:r></w:p>" + _DOCUMENT_TAIL
    filler = size - len(head) - len(tail)

    def chunks():
        yield head
        block = b"Lorem ipsum " * (MiB // 12)
        for _ in range(filler // len(block)):
            yield block
        yield b"x" * (filler % len(block))
        yield tail

    return _docx_around(chunks(), base)


def docx_of_one_letter_paragraphs(size: int, *, base: Path) -> bytes:
    """A .docx whose document.xml is ``size`` bytes of paragraphs of one letter each."""
    paragraph = b"<w:p><w:r><w:t>a</w:t></w:r></w:p>"
    count = (size - len(_DOCUMENT_HEAD) - len(_DOCUMENT_TAIL)) // len(paragraph)
    per_chunk = MiB // len(paragraph)

    def chunks():
        yield _DOCUMENT_HEAD
        for start in range(0, count, per_chunk):
            yield paragraph * min(per_chunk, count - start)
        yield _DOCUMENT_TAIL

    return _docx_around(chunks(), base)


def pdf(pages: list[int], streams: dict[int, bytes], *, compress: bool = True) -> bytes:
    """A PDF of ``len(pages)`` pages in Helvetica: page ``i`` shows content stream ``pages[i]``
    (a key of ``streams``; several pages may share one). A correct cross-reference table."""
    stream_ids = sorted(set(pages))
    first_page = 4
    first_stream = first_page + len(pages)
    number_of = {key: first_stream + i for i, key in enumerate(stream_ids)}
    kids = b" ".join(b"%d 0 R" % (first_page + i) for i in range(len(pages)))
    objects = [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        b"<< /Type /Pages /Kids [%s] /Count %d >>" % (kids, len(pages)),
        b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>",
    ]
    for key in pages:
        objects.append(
            b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents %d 0 R "
            b"/Resources << /Font << /F1 3 0 R >> >> >>" % number_of[key]
        )
    for key in stream_ids:
        data = zlib.compress(streams[key], 9) if compress else streams[key]
        flate = b" /Filter /FlateDecode" if compress else b""
        objects.append(b"<< /Length %d%s >>\nstream\n" % (len(data), flate) + data + b"\nendstream")
    out = bytearray(b"%PDF-1.4\n")
    offsets = []
    for number, body in enumerate(objects, start=1):
        offsets.append(len(out))
        out += b"%d 0 obj\n" % number + body + b"\nendobj\n"
    xref = len(out)
    out += b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1)
    out += b"".join(b"%010d 00000 n \n" % offset for offset in offsets)
    out += b"trailer\n<< /Size %d /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (len(objects) + 1, xref)
    return bytes(out)


def text_stream(size: int, *, line: bytes = b"BT /F1 12 Tf 72 720 Td (A line of text on the page.) Tj ET\n") -> bytes:
    """A content stream of ``size`` bytes (about) that shows text, line after line."""
    return line * max(size // len(line), 1)


def pdf_sharing_one_stream(*, pages: int, stream_size: int) -> bytes:
    """A PDF whose ``pages`` pages all show one content stream of ``stream_size`` bytes."""
    return pdf([0] * pages, {0: text_stream(stream_size)})


def pdf_of_texts(texts: list[str]) -> bytes:
    """A PDF of one page per text (no parentheses or backslashes in the texts)."""
    return pdf(
        list(range(len(texts))), {i: f"BT /F1 12 Tf 72 720 Td ({t}) Tj ET".encode() for i, t in enumerate(texts)}
    )


def _status_kb(field: bytes) -> int:
    with open("/proc/self/status", "rb") as status:
        for line in status:
            if line.startswith(field + b":"):
                return int(line.split()[1])
    raise RuntimeError(f"{field!r} not in /proc/self/status")


@dataclass
class MemoryWatch:
    """This process's resident memory before and its peak during a block (``with MemoryWatch() as w``).

    The peak (``VmHWM``) is reset on entry by writing 5 to ``/proc/self/clear_refs``, so
    ``growth_mb`` is the most the block added to what was resident when it began.
    """

    before_kb: int = 0
    peak_kb: int = 0

    def __enter__(self) -> MemoryWatch:
        with open("/proc/self/clear_refs", "w") as clear:
            clear.write("5")
        self.before_kb = _status_kb(b"VmRSS")
        return self

    def __exit__(self, *exc) -> None:
        self.peak_kb = _status_kb(b"VmHWM")

    @property
    def growth_mb(self) -> float:
        return max(self.peak_kb - self.before_kb, 0) / 1024


def docx_with_a_hidden_tree(size: int, *, base: Path) -> bytes:
    """A .docx with one visible paragraph and ``size`` bytes of one-letter paragraphs inside a
    content control, which python-docx parses into its tree (memory) but never iterates (time)."""
    paragraph = b"<w:p><w:r><w:t>a</w:t></w:r></w:p>"
    visible = b"<w:p><w:r><w:t>Visible text of the document.</w:t></w:r></w:p>"
    count = size // len(paragraph)
    per_chunk = MiB // len(paragraph)

    def chunks():
        yield _DOCUMENT_HEAD + visible + b"<w:sdt><w:sdtContent>"
        for start in range(0, count, per_chunk):
            yield paragraph * min(per_chunk, count - start)
        yield b"</w:sdtContent></w:sdt>" + _DOCUMENT_TAIL

    return _docx_around(chunks(), base)
