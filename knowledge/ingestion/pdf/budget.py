"""What a PDF's pages may unpack and extract, counted with pypdf before the layout reader parses a
page: the first pass that guards pdfplumber (pdfminer decompresses what pypdf counted here).

A content stream over ``RATIO_EXEMPT_BYTES`` that decompresses more than ``KB_PARSE_MAX_RATIO``
times, or a running total of decompressed streams (a stream shared by several pages counts on
each) over ``KB_PARSE_MAX_UNPACKED_MB``, is an ``archive_bomb``; more than ``KB_PARSE_MAX_CHARS``
characters of text so far is ``document_too_large``.
"""

from __future__ import annotations

from django.conf import settings

from core.errors import InvalidInput
from core.uploads import size_text

# Streams smaller than this pass the ratio cap: small, highly compressible parts of real files.
RATIO_EXEMPT_BYTES = 2**20
# How deep form XObjects nested in form XObjects are followed (text extraction follows them too).
MAX_FORM_DEPTH = 10


class PdfBudget:
    """What a PDF's pages have unpacked and extracted so far, against the caps."""

    def __init__(self, *, name: str, file_size: int):
        self.name, self.file_size = name, file_size
        self.unpacked = 0
        self.chars = 0
        self.max_unpacked = int(settings.KB_PARSE_MAX_UNPACKED_MB * 2**20)
        self.max_ratio = settings.KB_PARSE_MAX_RATIO
        self.max_chars = settings.KB_PARSE_MAX_CHARS

    def count_streams(self, page) -> None:
        """Add the decompressed size of ``page``'s (a pypdf page) content streams and form
        XObjects; raise ``archive_bomb`` past a cap."""
        for stream in page_streams(page):
            decoded = len(stream.get_data())
            raw = len(getattr(stream, "_data", b"") or b"") or decoded
            if decoded > RATIO_EXEMPT_BYTES and decoded > raw * self.max_ratio:
                raise InvalidInput(
                    f"{self.name}: a content stream of the PDF unpacks to {decoded // max(raw, 1):,} times its "
                    f"compressed size ({size_text(decoded)}); the limit is {self.max_ratio} times. "
                    "The file may be built to exhaust the server.",
                    code="archive_bomb",
                )
            self.unpacked += decoded
            if self.unpacked > self.max_unpacked:
                raise InvalidInput(
                    f"{self.name}: the PDF's pages unpack to more than {size_text(self.max_unpacked)} of content, "
                    "the limit; split it into smaller files.",
                    code="archive_bomb",
                )

    def count_text(self, characters: int) -> None:
        """Add one page's ``characters``; ``document_too_large`` past ``KB_PARSE_MAX_CHARS``."""
        self.chars += characters
        if self.chars > self.max_chars:
            raise InvalidInput(
                f"{self.name}: the PDF holds more than {self.max_chars:,} characters of text, the limit; "
                "split it into smaller files.",
                code="document_too_large",
            )


def page_streams(page):
    """The content streams of ``page`` (a pypdf page) and the form XObjects of its resources
    (nested ones too), each once per page."""
    from pypdf.generic import ArrayObject, StreamObject

    seen: set[int] = set()

    def resolved(value):
        return value.get_object() if value is not None else None

    def forms(resources, depth: int):
        resources = resolved(resources)
        xobjects = resolved(resources.get("/XObject")) if hasattr(resources, "get") else None
        if depth > MAX_FORM_DEPTH or not hasattr(xobjects, "values"):
            return
        for value in xobjects.values():
            xobject = resolved(value)
            if isinstance(xobject, StreamObject) and xobject.get("/Subtype") == "/Form" and id(xobject) not in seen:
                seen.add(id(xobject))
                yield xobject
                yield from forms(xobject.get("/Resources"), depth + 1)

    contents = resolved(page.get("/Contents"))
    for item in contents if isinstance(contents, ArrayObject) else [contents]:
        stream = resolved(item)
        if isinstance(stream, StreamObject) and id(stream) not in seen:
            seen.add(id(stream))
            yield stream
    yield from forms(page.get("/Resources"), 0)
