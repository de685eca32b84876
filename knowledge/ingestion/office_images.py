"""The pictures inside office files (.docx, .pptx, .odt), read with OCR where they stand.

A screenshot pasted into a report, a slide that is one big scanned image, a diagram with labels:
their text is read by ``knowledge.ingestion.ocr.ocr_image`` and kept in the document's text at the
picture's place as ``[Image: <text>]`` (the OCR's lines, each on a line of its own). A picture in
which OCR finds no text keeps its alternative text (the description a person or the office
program gave it), else nothing.

Skipped: pictures smaller than ``MIN_WIDTH_PX`` x ``MIN_HEIGHT_PX`` (icons, bullets, rules),
formats Pillow cannot open (EMF, WMF, SVG: their alternative text stays), pictures of more than
``MAX_PIXELS`` (read as a bomb would be), and, past ``KB_OCR_MAX_PAGES`` pictures read in one
document, the rest (they keep their alternative text; ``metadata["ocr_images_skipped"]`` counts
them). With ``KB_OCR_ENGINE=off`` (or no engine installed) no picture is OCR'd.
``OcrDeferred`` (a job left to the OCR queue) and a parse timeout go through to the caller.
"""

from __future__ import annotations

import io
import logging
import warnings

from django.conf import settings

logger = logging.getLogger(__name__)

# Smaller pictures are icons, bullets or rules, not text worth reading.
MIN_WIDTH_PX, MIN_HEIGHT_PX = 100, 30
# Larger pictures are not decoded (a 40-megapixel photo, or a file built to exhaust memory).
MAX_PIXELS = 40_000_000


class ImageReader:
    """Reads one document's pictures with OCR, at most ``KB_OCR_MAX_PAGES`` of them.

    ``read`` counts the pictures OCR'd, ``skipped`` those left out over the budget; ``pages``
    and ``skipped_pages`` the pages (a .pptx's slides) they were on.
    """

    def __init__(self, *, name: str):
        self.name = name
        self.limit = settings.KB_OCR_MAX_PAGES
        self.read = 0
        self.skipped = 0
        self.pages: list[int] = []
        self.skipped_pages: list[int] = []
        self.unavailable = settings.KB_OCR_ENGINE == "off"

    def text(self, data: bytes | None, *, alt: str = "", page: int = 0) -> str:
        """The text that stands for a picture of ``data`` (its file's bytes): ``[Image: <OCR
        text>]``, else ``[Image: <alt>]`` when it has an alternative text, else "". ``page``: the
        page (slide) it is on, 0 for none."""
        alt = " ".join(alt.split())
        image = _opened(data) if data else None
        if image is not None and (image.width < MIN_WIDTH_PX or image.height < MIN_HEIGHT_PX):
            return ""
        read = self._ocr(image, page=page) if image is not None else ""
        text = read or alt
        return f"[Image: {text}]" if text else ""

    def _ocr(self, image, *, page: int) -> str:
        """The OCR text of ``image`` (lines on lines of their own), "" when it is not read."""
        from knowledge.ingestion.ocr import OcrUnavailable, ocr_image

        if self.unavailable:
            return ""
        if self.read >= self.limit:
            self.skipped += 1
            if page and page not in self.skipped_pages:
                self.skipped_pages.append(page)
            return ""
        if image.width * image.height > MAX_PIXELS:
            logger.info("%s: a picture of %dx%d pixels is not read", self.name, image.width, image.height)
            return ""
        try:
            image.load()
        except MemoryError:
            raise
        except Exception:  # a damaged picture: the document is still read
            logger.info("%s: a picture could not be decoded", self.name, exc_info=True)
            return ""
        try:
            result = ocr_image(image)
        except OcrUnavailable:
            self.unavailable = True
            return ""
        self.read += 1
        if page and page not in self.pages:
            self.pages.append(page)
        lines = (" ".join(line.split()) for line in result.text.split("\n"))
        return "\n".join(line for line in lines if line)

    def metadata(self, *, paged: bool = False) -> dict:
        """What the document's metadata says of its pictures: how many were OCR'd and skipped
        (and for a paged document, a .pptx, on which pages: ``ocr_pages`` and ``ocr_skipped``)."""
        found: dict = {}
        if self.read:
            found["ocr_images"] = self.read
        if self.skipped:
            found["ocr_images_skipped"] = self.skipped
        if paged and self.pages:
            found["ocr_pages"] = sorted(self.pages)
        if paged and self.skipped_pages:
            found["ocr_skipped"] = sorted(self.skipped_pages)
        return found


def _opened(data: bytes):
    """A Pillow image of ``data`` (its header read, not its pixels), or None if Pillow cannot
    open it."""
    from PIL import Image

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # DecompressionBombWarning: MAX_PIXELS decides
            return Image.open(io.BytesIO(data))
    except Exception:  # EMF, WMF, SVG, damaged data, a decompression bomb
        return None
