"""OCR: the text of an image (a scanned PDF page, a screenshot in a slide deck), read offline.

``ocr_image(image, engine=None)`` returns an ``OcrResult``: the text in reading order and one
``OcrLine`` per line of text with its box in image pixels and the engine's confidence. Two
engines, chosen by ``KB_OCR_ENGINE`` (or per call):

* ``"tesseract"`` (the default): Debian's ``tesseract`` binary (``apt install tesseract-ocr``),
  run as a subprocess on one thread (its OpenMP threads spin on a busy machine) with
  ``TESSERACT_LANGUAGES``, its own layout analysis and a timeout. Its memory is its own process's,
  outside the parse's.
* ``"rapidocr"``: RapidOCR 3.x, PaddleOCR's PP-OCRv6 detection and recognition models run by
  onnxruntime, in this process. The models ship in the ``rapidocr`` wheel and are loaded from
  there by path, so nothing is ever downloaded. The engine is made once per process, on first
  use, on ``ONNX_THREADS`` thread; a process forked after it was made (the parse sandbox) makes
  its own. Loading it and reading an A4 page grow the process by about 1.2 GB of address space
  (0.8 GB resident): the parse sandbox needs ``KB_PARSE_MEMORY_MB=2048`` for it.
* ``"off"``: no OCR; ``ocr_image`` raises ``OcrUnavailable`` (so does an engine that is not
  installed), and readers name the pages they could not read.

Both read printed English with under 1 % of characters wrong, clean or scanned noisy and askew;
Tesseract takes a fifth to a third of RapidOCR's CPU time a page, RapidOCR reads light text on a
dark screenshot better and knows more scripts. The figures, measured with
``python benchmarks/ocr.py``, are in ``docs/benchmarks.md`` ("OCR"). Pages are read as they come:
a deskew measured there took RapidOCR's few errors on skewed pages away for 16 % more time and
added to Tesseract's, both engines being far within the target without it.

Lines of RapidOCR are put in reading order here: a page of two columns (a gutter with lines on
both sides) is read column by column, a line across the gutter (a title) between the bands it
separates; pieces of one line within a column are joined. A blank line separates paragraphs
(a gap of more than a line's height) and columns.

Time: in the parse sandbox's child each ``ocr_image`` call extends the parse's time limit by
``KB_OCR_PAGE_TIMEOUT_S`` (``sandbox.parse_time_extend``, at most ``KB_OCR_MAX_PAGES`` pages'
worth), so a scanned PDF gets the time its pages need and a file of text keeps the short limit.

Queue: inside ``ocr_deferred()`` (an ingestion job on the ordinary queue while ``KB_OCR_QUEUE``
is set) ``ocr_image`` raises ``OcrDeferred`` instead of reading, which ends the parse at the
first image that needs OCR; the job is then queued on the OCR queue and parsed there with OCR
(``knowledge.services.uploads``). Readers must let ``OcrDeferred`` through.
"""

from __future__ import annotations

import csv
import io
import os
import shutil
import subprocess
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from pathlib import Path
from statistics import median

from django.conf import settings

from core.errors import ApplicationError, InvalidInput
from knowledge.ingestion import sandbox

ENGINES = ("rapidocr", "tesseract")
# onnxruntime threads per RapidOCR engine (intra-op). One: a child forked by the parse sandbox from
# a process whose engine ran on a pool of threads hangs in its own engine (the pool's locks), and
# the parse's CPU limit counts every thread (two spent 15-45 % more CPU a page for the same text,
# and took no less wall time on two busy cores).
ONNX_THREADS = 1
# Tesseract's language data (Debian: tesseract-ocr-eng; add others with their packages).
TESSERACT_LANGUAGES = "eng"
# An image's longest side is brought down to this many pixels before OCR (boxes are given in the
# image's own pixels): a 4,000-pixel side is an A4 page at 340 dpi, more than OCR needs.
MAX_SIDE_PX = 4000
# RapidOCR's settings (its config.yaml's keys): quiet; onnxruntime on ONNX_THREADS; and without its
# classifier of upside-down lines, which turned upright lines of English prose over (it garbled 4 of
# the 21 lines of a page of benchmarks/ocr.py; none without it).
RAPIDOCR_OPTIONS: dict[str, object] = {
    "Global.log_level": "error",
    "Global.use_cls": False,
    "EngineConfig.onnxruntime.intra_op_num_threads": ONNX_THREADS,
    "EngineConfig.onnxruntime.inter_op_num_threads": 1,
}
# The RapidOCR models in the wheel, given by path: detection, recognition (its character list
# inside), and the line classifier, unused but named so that nothing is ever fetched for it.
_RAPIDOCR_MODELS = {
    "Det.model_path": "PP-OCRv6_det_small.onnx",
    "Rec.model_path": "PP-OCRv6_rec_small.onnx",
    "Cls.model_path": "ch_ppocr_mobile_v2.0_cls_mobile.onnx",
}


@dataclass(frozen=True)
class OcrLine:
    """A line of text read from an image: ``box`` is (x0, top, x1, bottom) in the image's pixels
    from its top-left corner; ``confidence`` the engine's, in [0, 1]."""

    text: str
    box: tuple[float, float, float, float]
    confidence: float


@dataclass(frozen=True)
class OcrResult:
    """What an image says: ``text`` in reading order (lines separated by a newline, paragraphs
    and columns by a blank line) and its ``lines`` in the same order."""

    text: str
    lines: list[OcrLine]


# Lines grouped into paragraphs, in reading order.
Paragraphs = list[list[OcrLine]]


class OcrUnavailable(InvalidInput):
    """OCR is off (``KB_OCR_ENGINE=off``), the engine is unknown, or it is not installed."""

    code = "ocr_unavailable"


class OcrDeferred(ApplicationError):
    """The file needs OCR and OCR is left to the OCR queue's workers (``ocr_deferred``)."""

    code = "ocr_deferred"


_deferred: ContextVar[bool] = ContextVar("ocr_deferred", default=False)


@contextmanager
def ocr_deferred(defer: bool = True) -> Iterator[None]:
    """Within the block (and in sandbox children forked in it), ``ocr_image`` raises
    ``OcrDeferred`` instead of reading, when ``defer`` is true and OCR is not off."""
    token = _deferred.set(defer)
    try:
        yield
    finally:
        _deferred.reset(token)


def ocr_engine(engine: str | None = None) -> str:
    """The engine ``ocr_image`` would use: ``engine``, else ``KB_OCR_ENGINE``.

    Raises ``OcrUnavailable`` when it is "off", unknown, or not installed (the ``rapidocr``
    package, the ``tesseract`` binary). Cheap: nothing is loaded.
    """
    name = engine or settings.KB_OCR_ENGINE
    if name == "off":
        raise OcrUnavailable("OCR is turned off (KB_OCR_ENGINE=off); scanned pages are not read.")
    if name not in ENGINES:
        raise OcrUnavailable(f"Unknown OCR engine {name!r}; the engines are {', '.join(ENGINES)} (or off).")
    if name == "tesseract" and _tesseract_binary() is None:
        raise OcrUnavailable("The tesseract binary is not installed (apt install tesseract-ocr).")
    if name == "rapidocr" and _rapidocr_model_dir() is None:
        raise OcrUnavailable("RapidOCR is not installed (pip install 'rapidocr>=3,<4').")
    return name


def ocr_image(image, *, engine: str | None = None) -> OcrResult:
    """Read the text of ``image`` (a ``PIL.Image.Image``, any mode) with ``engine`` (default
    ``KB_OCR_ENGINE``).

    Returns an ``OcrResult`` (empty text and no lines for an image without text). Raises
    ``OcrUnavailable`` (see ``ocr_engine``), ``OcrDeferred`` inside ``ocr_deferred()``, and
    ``InvalidInput`` with code ``parse_timeout`` when Tesseract runs past twice
    ``KB_OCR_PAGE_TIMEOUT_S``. In the parse sandbox's child it first extends the parse's time
    limit by ``KB_OCR_PAGE_TIMEOUT_S``.
    """
    if _deferred.get() and (engine or settings.KB_OCR_ENGINE) != "off":
        raise OcrDeferred("The file has images or pages that need OCR; it is read by the OCR queue's workers.")
    name = ocr_engine(engine)
    sandbox.parse_time_extend(settings.KB_OCR_PAGE_TIMEOUT_S)
    image, scale = _prepared(image)
    if name == "rapidocr":
        paragraphs = _reading_order(_rapidocr_lines(image), width=image.width)
    else:
        paragraphs = _tesseract_paragraphs(image)
    if scale != 1.0:
        paragraphs = [[_scaled(line, 1 / scale) for line in paragraph] for paragraph in paragraphs]
    return OcrResult(
        text="\n\n".join("\n".join(line.text for line in paragraph) for paragraph in paragraphs),
        lines=[line for paragraph in paragraphs for line in paragraph],
    )


def _scaled(line: OcrLine, factor: float) -> OcrLine:
    x0, top, x1, bottom = (round(v * factor, 1) for v in line.box)
    return OcrLine(line.text, (x0, top, x1, bottom), line.confidence)


def _prepared(image):
    """``image`` in RGB or grey, its longest side at most ``MAX_SIDE_PX``; and the scale applied."""
    from PIL import Image

    scale = min(1.0, MAX_SIDE_PX / max(image.width, image.height, 1))
    if image.mode not in ("RGB", "L"):
        if "A" in image.getbands() or image.mode == "P":  # transparent: on white, as printed
            rgba = image.convert("RGBA")
            image = Image.new("RGB", rgba.size, "white")
            image.paste(rgba, mask=rgba.getchannel("A"))
        else:
            image = image.convert("RGB")
    if scale < 1.0:
        image = image.resize((max(1, round(image.width * scale)), max(1, round(image.height * scale))))
    return image, scale


# RapidOCR -----------------------------------------------------------------------------------

_rapidocr_lock = threading.Lock()
_rapidocr_engine: tuple[int, object] | None = None  # (the pid that made it, the engine)


def _rapidocr_model_dir() -> Path | None:
    try:
        import rapidocr
    except ImportError:
        return None
    folder = Path(rapidocr.__file__).parent / "models"
    return folder if all((folder / file).is_file() for file in _RAPIDOCR_MODELS.values()) else None


def _rapidocr():
    """This process's RapidOCR engine, made on first use from the wheel's models (by path, so it
    never downloads). A forked child does not use its parent's (onnxruntime's threads do not
    survive a fork): it makes its own."""
    global _rapidocr_engine
    with _rapidocr_lock:
        if _rapidocr_engine is None or _rapidocr_engine[0] != os.getpid():
            from rapidocr import RapidOCR

            folder = _rapidocr_model_dir()
            if folder is None:
                raise OcrUnavailable("RapidOCR's models are missing from its installation.")
            params = {key: str(folder / file) for key, file in _RAPIDOCR_MODELS.items()}
            params.update({"Global.model_root_dir": str(folder), **RAPIDOCR_OPTIONS})
            _rapidocr_engine = (os.getpid(), RapidOCR(params=params))
        return _rapidocr_engine[1]


def _rapidocr_lines(image) -> list[OcrLine]:
    """RapidOCR's text boxes (pieces of lines, in its own order) as ``OcrLine``."""
    result = _rapidocr()(image)
    if result.boxes is None or result.txts is None:
        return []
    lines = []
    for quad, text, score in zip(result.boxes, result.txts, result.scores, strict=False):
        text = " ".join(str(text).split())
        if not text:
            continue
        xs, ys = [float(p[0]) for p in quad], [float(p[1]) for p in quad]
        lines.append(OcrLine(text, (min(xs), min(ys), max(xs), max(ys)), float(score)))
    return lines


# Tesseract ----------------------------------------------------------------------------------


def _tesseract_binary() -> str | None:
    return shutil.which("tesseract")


def _tesseract_paragraphs(image) -> Paragraphs:
    """Tesseract's paragraphs of lines (its TSV output's words grouped by block, paragraph and
    line), in its reading order."""
    png = io.BytesIO()
    image.save(png, format="PNG")
    timeout_s = 2 * settings.KB_OCR_PAGE_TIMEOUT_S
    try:
        done = subprocess.run(
            [_tesseract_binary() or "tesseract", "stdin", "stdout", "-l", TESSERACT_LANGUAGES, "--psm", "3", "tsv"],
            input=png.getvalue(),
            capture_output=True,
            timeout=timeout_s,
            env={**os.environ, "OMP_THREAD_LIMIT": "1"},  # its OpenMP threads spin: slower on a busy machine
            check=False,
        )
    except FileNotFoundError as exc:
        raise OcrUnavailable("The tesseract binary is not installed (apt install tesseract-ocr).") from exc
    except subprocess.TimeoutExpired as exc:
        raise InvalidInput(f"OCR of an image took longer than {timeout_s} s.", code="parse_timeout") from exc
    if done.returncode != 0:
        message = done.stderr.decode("utf-8", "replace").strip().splitlines()[-1:] or ["no message"]
        raise InvalidInput(f"Tesseract could not read an image ({message[0][:200]}).", code="parse_failed")
    return _tesseract_tsv_paragraphs(done.stdout.decode("utf-8", "replace"))


def _tesseract_tsv_paragraphs(tsv: str) -> Paragraphs:
    """Paragraphs of lines from Tesseract's TSV (its level-5 rows are words, ``conf`` 0-100,
    -1 for what is not text)."""
    groups: dict[tuple[str, str, str], list[dict]] = {}
    for row in csv.DictReader(io.StringIO(tsv), delimiter="\t", quoting=csv.QUOTE_NONE):
        if row.get("level") != "5" or not (row.get("text") or "").strip() or float(row.get("conf") or -1) < 0:
            continue
        groups.setdefault((row["block_num"], row["par_num"], row["line_num"]), []).append(row)
    paragraphs: dict[tuple[str, str], list[OcrLine]] = {}
    for (block, par, _), words in groups.items():
        box = (
            min(float(w["left"]) for w in words),
            min(float(w["top"]) for w in words),
            max(float(w["left"]) + float(w["width"]) for w in words),
            max(float(w["top"]) + float(w["height"]) for w in words),
        )
        text = " ".join(w["text"].strip() for w in words)
        confidence = sum(float(w["conf"]) for w in words) / len(words) / 100
        paragraphs.setdefault((block, par), []).append(OcrLine(text, box, confidence))
    return list(paragraphs.values())


# Reading order ------------------------------------------------------------------------------


def _reading_order(pieces: list[OcrLine], *, width: int) -> Paragraphs:
    """Pieces of lines (boxes anywhere on the page) as paragraphs of lines in reading order:
    column by column within each band between pieces that cross the gutter, when the page has
    one (``_gutter``)."""
    gutter = _gutter(pieces, width=width)
    if gutter is None:
        return _paragraphs(pieces)
    ordered: Paragraphs = []
    band: list[OcrLine] = []
    for piece in sorted(pieces, key=lambda p: p.box[1]):
        if piece.box[0] < gutter < piece.box[2]:  # across both columns: ends the band
            ordered += _band_order(band, gutter) + [[piece]]
            band = []
        else:
            band.append(piece)
    return ordered + _band_order(band, gutter)


def _band_order(band: list[OcrLine], gutter: float) -> Paragraphs:
    left = [p for p in band if p.box[2] <= gutter]
    right = [p for p in band if p.box[0] >= gutter]
    return _paragraphs(left) + _paragraphs(right)


def _gutter(pieces: list[OcrLine], *, width: int) -> float | None:
    """The x of a gutter between two columns, or None: the position in the middle 30-70 % of the
    page crossed by the fewest pieces, if at most a fifth of them cross it (titles) and at least
    three pieces and a quarter of the rest lie on each side."""
    if len(pieces) < 6 or width < 10:
        return None
    crossing, x = min(
        (sum(1 for p in pieces if p.box[0] < x < p.box[2]), x)
        for x in range(int(width * 0.3), int(width * 0.7) + 1, max(1, width // 200))
    )
    left = sum(1 for p in pieces if p.box[2] <= x)
    right = len(pieces) - left - crossing
    if crossing > len(pieces) / 5 or min(left, right) < max(3, (left + right) / 4):
        return None
    return float(x)


def _paragraphs(pieces: list[OcrLine]) -> Paragraphs:
    """Pieces of one column grouped into lines (a piece whose middle lies within a line's height
    joins it), top to bottom, each line's pieces left to right; a new paragraph where a line
    starts more than a line's height below the one above it."""
    rows: list[list[OcrLine]] = []
    for piece in sorted(pieces, key=lambda p: (p.box[1], p.box[0])):
        middle = (piece.box[1] + piece.box[3]) / 2
        if rows and min(p.box[1] for p in rows[-1]) <= middle <= max(p.box[3] for p in rows[-1]):
            rows[-1].append(piece)
        else:
            rows.append([piece])
    lines = [_merged(sorted(row, key=lambda p: p.box[0])) for row in rows]
    if not lines:
        return []
    height = median(line.box[3] - line.box[1] for line in lines)
    paragraphs = [[lines[0]]]
    for above, line in zip(lines, lines[1:], strict=False):
        if line.box[1] - above.box[3] > height:
            paragraphs.append([line])
        else:
            paragraphs[-1].append(line)
    return paragraphs


def _merged(row: list[OcrLine]) -> OcrLine:
    if len(row) == 1:
        return row[0]
    chars = sum(len(p.text) for p in row)
    return OcrLine(
        " ".join(p.text for p in row),
        (
            min(p.box[0] for p in row),
            min(p.box[1] for p in row),
            max(p.box[2] for p in row),
            max(p.box[3] for p in row),
        ),
        sum(p.confidence * len(p.text) for p in row) / chars,
    )
