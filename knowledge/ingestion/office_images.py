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

Each picture kept as text is also kept to be shown beside the citations of its passage
(``knowledge.figures``), at most ``MAX_PICTURES`` per document (later ones keep only their text):
a PNG (over white where it was transparent) scaled down to ``MAX_SIDE_PX`` on its longer side, and
halved again until it is at most ``MAX_BYTES`` (a picture that never gets there is not kept). Its
caption is the document's caption paragraph next to it when the reader finds one, else its
alternative text, else its OCR text (one line, at most ``MAX_CAPTION_CHARS``). Pictures of more
than ``MAX_PIXELS``, and those Pillow cannot open or decode, are not kept. The reader's block
carries the picture (``knowledge.ingestion.office_blocks``), and the ``ReadDocument`` returns it
(``images``, listed in ``metadata["figures"]``) from the parse sandbox's child.
"""

from __future__ import annotations

import io
import logging
import warnings

from django.conf import settings

from knowledge.ingestion.office_blocks import Block
from knowledge.ingestion.sandbox import REPLY_PICTURES_BYTES

logger = logging.getLogger(__name__)

# Smaller pictures are icons, bullets or rules, not text worth reading.
MIN_WIDTH_PX, MIN_HEIGHT_PX = 100, 30
# Larger pictures are not decoded (a 40-megapixel photo, or a file built to exhaust memory).
MAX_PIXELS = 40_000_000
# A kept picture's longest side (pixels) and the most bytes of its PNG: a figure's, for PDF
# figures too (``knowledge.figures``).
MAX_SIDE_PX = 640
MAX_BYTES = 512 * 1024
# The most pictures kept per document (their PNGs travel back from the parse sandbox together).
MAX_PICTURES = 50
# A caption made of alternative or OCR text is cut to this many characters.
MAX_CAPTION_CHARS = 300
# Below this longer side (pixels) a picture is not halved further to fit ``MAX_BYTES``.
_MIN_SIDE_PX = 64


class ImageReader:
    """Reads one document's pictures with OCR, at most ``KB_OCR_MAX_PAGES`` of them.

    ``read`` counts the pictures OCR'd, ``skipped`` those left out over the budget; ``pages``
    and ``skipped_pages`` the pages (a .pptx's slides) they were on; ``kept`` the pictures kept
    to be shown (at most ``MAX_PICTURES``) and ``kept_bytes`` their PNGs' size.
    """

    def __init__(self, *, name: str):
        self.name = name
        self.limit = settings.KB_OCR_MAX_PAGES
        self.read = 0
        self.skipped = 0
        self.pages: list[int] = []
        self.skipped_pages: list[int] = []
        self.unavailable = settings.KB_OCR_ENGINE == "off"
        self.kept = 0
        self.kept_bytes = 0

    def text(self, data: bytes | None, *, alt: str = "", page: int = 0) -> str:
        """The text that stands for a picture of ``data`` (its file's bytes): ``[Image: <OCR
        text>]``, else ``[Image: <alt>]`` when it has an alternative text, else "". ``page``: the
        page (slide) it is on, 0 for none."""
        block = self.block(data, alt=alt, page=page, keep=False)
        return block.text if block is not None else ""

    def block(self, data: bytes | None, *, alt: str = "", page: int = 0, caption: str = "", keep: bool = True):
        """The block of a picture of ``data``: its text (``text``) on ``page``, with the picture
        kept to be shown when ``keep`` (module docstring; ``caption``: the document's caption
        paragraph for it, "" for none). ``None`` when the picture stands for no text."""
        alt = " ".join(alt.split())
        image = _opened(data) if data else None
        if image is not None and (image.width < MIN_WIDTH_PX or image.height < MIN_HEIGHT_PX):
            return None
        read = self._ocr(image, page=page) if image is not None else ""
        text = read or alt
        if not text:
            return None
        block = Block(f"[Image: {text}]", page=page)
        if keep and image is not None:
            self._keep(block, image, caption=" ".join(caption.split()) or alt or " ".join(read.split()))
        return block

    def _keep(self, block: Block, image, *, caption: str) -> None:
        """Put the PNG of ``image`` and its figure on ``block`` while fewer than ``MAX_PICTURES``
        are kept (and their PNGs fit the sandbox's reply)."""
        if self.kept >= MAX_PICTURES or image.width * image.height > MAX_PIXELS:
            return
        png = _png(image, name=self.name)
        if png is None or self.kept_bytes + len(png[0]) > REPLY_PICTURES_BYTES:
            return
        self.kept += 1
        self.kept_bytes += len(png[0])
        if len(caption) > MAX_CAPTION_CHARS:
            caption = caption[: MAX_CAPTION_CHARS - 1].rstrip() + "…"
        block.picture = png[0]
        block.figure = {"caption": caption, "width": png[1], "height": png[2]}

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


def _png(image, *, name: str) -> tuple[bytes, int, int] | None:
    """``image`` as a PNG of at most ``MAX_SIDE_PX`` a side and ``MAX_BYTES``, with its width and
    height; ``None`` when it cannot be decoded or never fits."""
    from PIL import Image

    try:
        image.draft("RGB", (MAX_SIDE_PX, MAX_SIDE_PX))  # a JPEG not yet loaded decodes smaller
        if image.mode not in ("RGB", "RGBA", "L", "LA"):  # palettes, CMYK: scaled as colours
            image = image.convert("RGBA")
        image.thumbnail((MAX_SIDE_PX, MAX_SIDE_PX))  # scaled before converting: less memory
        picture = image.convert("RGBA")
        picture = Image.alpha_composite(Image.new("RGBA", picture.size, "white"), picture).convert("RGB")
        while True:
            out = io.BytesIO()
            picture.save(out, format="PNG", optimize=True)
            if out.tell() <= MAX_BYTES:
                return out.getvalue(), picture.width, picture.height
            if max(picture.size) // 2 < _MIN_SIDE_PX:
                return None
            picture = picture.resize((max(picture.width // 2, 1), max(picture.height // 2, 1)))
    except MemoryError:
        raise
    except Exception:  # a damaged picture, or a mode Pillow cannot convert: its text stays
        logger.info("%s: a picture could not be kept", name, exc_info=True)
        return None


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
