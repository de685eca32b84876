"""How well and how fast each OCR engine reads scanned pages (``knowledge.ingestion.ocr``).

Usage: python benchmarks/ocr.py [--pages N] [--engines rapidocr,tesseract] [--threads 1,2]
       [--deskew] [--out FILE]

Renders ``N`` A4 pages (default 4) with Pillow from known text: a title and three paragraphs of
English prose each, the paragraphs of HotpotQA's contexts (``../shared/datasets/hotpotqa``, read in
place; ASCII-only paragraphs of 300-700 characters, in file order), at 11 pt in a serif or a sans
font in turn, 1-inch margins. Two conditions:

* ``clean_300dpi``: the page as rendered at 300 dpi;
* ``noisy_150dpi``: rendered at 150 dpi, rotated by 1-2 degrees (alternating sides) and given
  Gaussian noise (sigma 25 on 0-255 grey levels), as a quick office scan;
* ``screen_96dpi``: a screenshot, as pasted into slides: the page at 96 dpi (12 pt is 16 pixels),
  light grey text on a dark slate background.

Each engine reads each page with ``ocr_image`` (the engine made and warmed on a page first, so
the figures are per page of a running worker). The character error rate is the Levenshtein
distance between the whitespace-normalised text read and the reference, over the reference's
length (``rapidfuzz``), summed over the pages. Seconds per page are wall seconds and CPU seconds
(this process and its children: Tesseract runs as a subprocess), medians. ``--threads`` runs
RapidOCR with each onnxruntime thread count listed; ``--deskew`` also reads the noisy pages after
a projection-profile deskew (``deskewed``, its time counted). Memory: each engine also reads the
first clean page in a parse child (``knowledge.ingestion.sandbox``, its memory limit lifted), as
ingestion does, which reports how much its address space (what ``KB_PARSE_MEMORY_MB`` must allow)
and its resident memory grew; Tesseract's own process is watched for its peak resident memory (``VmHWM``, polled). Prints
one JSON object.
"""

import argparse
import io
import json
import os
import platform
import resource
import statistics
import subprocess
import time
from pathlib import Path

from _setup import ROOT, django_setup

DATASET = ROOT.parent / "shared" / "datasets" / "hotpotqa" / "hotpotqa-distractor-dev50.json"
FONTS = (
    "/usr/share/fonts/truetype/dejavu/DejaVuSerif.ttf",
    "/usr/share/fonts/truetype/liberation/LiberationSans-Regular.ttf",
    "/usr/share/fonts/truetype/liberation/LiberationSerif-Regular.ttf",
    "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf",
)
A4_INCHES = (8.27, 11.69)
NOISE_SIGMA = 25
SKEWS = (1.0, -1.5, 2.0, -1.0)


def page_texts(pages: int) -> list[tuple[str, list[str]]]:
    """``pages`` pages of (title, three paragraphs) from the dataset's contexts."""
    questions = json.loads(DATASET.read_text())
    found, seen = [], set()
    for question in questions:
        for title, sentences in zip(question["context"]["title"], question["context"]["sentences"], strict=False):
            text = " ".join("".join(sentences).split())
            if title not in seen and text.isascii() and title.isascii() and 300 <= len(text) <= 700:
                seen.add(title)
                found.append((title, text))
    if len(found) < pages * 3:
        raise SystemExit(f"{DATASET} has paragraphs for {len(found) // 3} pages only.")
    return [(found[3 * i][0], [text for _, text in found[3 * i : 3 * i + 3]]) for i in range(pages)]


def reference(title: str, paragraphs: list[str]) -> str:
    return normalised(" ".join([title, *paragraphs]))


def normalised(text: str) -> str:
    return " ".join(text.split())


def render(title: str, paragraphs: list[str], *, dpi: int, font_path: str, ink=0, paper=255):
    """The page as an A4 image at ``dpi`` (grey, or RGB for colours given as tuples): the title at
    16 pt, paragraphs at 11 pt, wrapped within 1-inch margins, never hyphenated."""
    from PIL import Image, ImageDraw, ImageFont

    width, height = round(A4_INCHES[0] * dpi), round(A4_INCHES[1] * dpi)
    image = Image.new("RGB" if isinstance(paper, tuple) else "L", (width, height), paper)
    draw = ImageDraw.Draw(image)
    margin, y = dpi, dpi
    for text, points, gap in [(title, 16, 1.0)] + [(p, 11, 0.6) for p in paragraphs]:
        font = ImageFont.truetype(font_path, round(points * dpi / 72))
        line_height = round(points * dpi / 72 * 1.3)
        for line in wrapped(text, font, width - 2 * margin):
            draw.text((margin, y), line, fill=ink, font=font)
            y += line_height
        y += round(line_height * gap)
    return image


def wrapped(text: str, font, width: float) -> list[str]:
    lines, line = [], ""
    for word in text.split():
        candidate = f"{line} {word}".strip()
        if line and font.getlength(candidate) > width:
            lines.append(line)
            line = word
        else:
            line = candidate
    return [*lines, line] if line else lines


def degraded(image, *, angle: float, seed: int):
    """``image`` rotated by ``angle`` degrees (white corners) with Gaussian noise added."""
    import numpy as np
    from PIL import Image

    rotated = image.rotate(angle, resample=Image.Resampling.BICUBIC, fillcolor=255)
    pixels = np.asarray(rotated, dtype=np.float32)
    noise = np.random.default_rng(seed).normal(0, NOISE_SIGMA, pixels.shape)
    return Image.fromarray(np.clip(pixels + noise, 0, 255).astype(np.uint8), mode="L")


def deskewed(image, *, most_degrees: float = 3.0):
    """``image`` turned upright when its lines lean by at most ``most_degrees``: the angle, in
    quarter degrees, whose rows of ink are the most uneven (a projection profile, on a copy at most
    1,000 pixels wide) is undone; ``image`` itself when that is less than a quarter degree."""
    import numpy as np
    from PIL import Image

    grey = image.convert("L")
    grey.thumbnail((1000, 1000))
    ink = Image.fromarray(((np.asarray(grey) < 128) * 255).astype(np.uint8))

    def unevenness(angle: float) -> float:
        rows = np.asarray(ink.rotate(angle, resample=Image.Resampling.NEAREST), dtype=np.float32).sum(axis=1)
        return float(np.square(np.diff(rows)).sum())

    steps = int(most_degrees * 4)
    angle = max((step / 4 for step in range(-steps, steps + 1)), key=lambda a: (unevenness(a), -abs(a)))
    if abs(angle) < 0.25:
        return image
    return image.rotate(angle, resample=Image.Resampling.BICUBIC, fillcolor=255 if image.mode == "L" else "white")


def cpu_seconds() -> float:
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def read_pages(engine: str, pages: list[tuple], *, deskew: bool = False) -> dict:
    """Read ``pages`` ((image, reference) pairs) with ``engine``: CER and seconds per page."""
    from rapidfuzz.distance import Levenshtein

    from knowledge.ingestion.ocr import ocr_image

    ocr_image(pages[0][0], engine=engine)  # warm: models loaded, first-run costs paid
    distance = length = 0
    walls, cpus, per_page = [], [], []
    for image, ref in pages:
        wall, cpu = time.perf_counter(), cpu_seconds()
        text = ocr_image(deskewed(image) if deskew else image, engine=engine).text
        walls.append(time.perf_counter() - wall)
        cpus.append(cpu_seconds() - cpu)
        page_distance = Levenshtein.distance(normalised(text), ref)
        distance, length = distance + page_distance, length + len(ref)
        per_page.append(round(page_distance / len(ref), 4))
    return {
        "cer": round(distance / length, 4),
        "cer_per_page": per_page,
        "wall_s_per_page": round(statistics.median(walls), 2),
        "cpu_s_per_page": round(statistics.median(cpus), 2),
    }


def child_memory(engine: str, image) -> dict:
    """Megabytes a parse child's address space grew by to read ``image`` with ``engine`` (from a
    fresh engine, imported there as ingestion's children do), and its subprocesses' peak resident
    memory. Run before this process loads an engine: a child reuses what its parent freed and
    imported, and one forked after a RapidOCR engine on two threads ran would hang."""
    from django.test import override_settings

    from knowledge.ingestion import sandbox
    from knowledge.ingestion.ocr import ocr_image

    def status_mb(field: str) -> int:
        with open("/proc/self/status") as status:
            return next(int(line.split()[1]) // 1024 for line in status if line.startswith(field + ":"))

    def parse() -> dict:
        start, resident = status_mb("VmSize"), status_mb("VmRSS")
        ocr_image(image, engine=engine)
        return {
            "address_space_growth_mb": status_mb("VmPeak") - start,
            "resident_growth_mb": status_mb("VmHWM") - resident,
        }

    with override_settings(KB_PARSE_MEMORY_MB=8192, KB_PARSE_TIMEOUT_S=600):
        found = sandbox.parse_isolated(parse, name="page.png")
    if engine == "tesseract":
        found["tesseract_peak_rss_mb"] = tesseract_peak_rss_mb(image)
    return found


def tesseract_peak_rss_mb(image) -> int:
    """The peak resident memory of Tesseract reading ``image`` as ``ocr_image`` runs it."""
    from knowledge.ingestion.ocr import TESSERACT_LANGUAGES

    png = io.BytesIO()
    image.convert("RGB").save(png, format="PNG")
    command = ["tesseract", "stdin", "stdout", "-l", TESSERACT_LANGUAGES, "--psm", "3", "tsv"]
    env = {**os.environ, "OMP_THREAD_LIMIT": "1"}
    process = subprocess.Popen(
        command, stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env
    )
    peak = 0
    process.stdin.write(png.getvalue())
    process.stdin.close()
    while process.poll() is None:
        try:
            with open(f"/proc/{process.pid}/status") as status:
                peak = max([peak] + [int(line.split()[1]) // 1024 for line in status if line.startswith("VmHWM:")])
        except (FileNotFoundError, ProcessLookupError):
            break
        time.sleep(0.02)
    return peak


def conditions(texts: list[tuple[str, list[str]]]) -> dict[str, list[tuple]]:
    clean, noisy, screen = [], [], []
    for number, (title, paragraphs) in enumerate(texts):
        font, ref = FONTS[number % len(FONTS)], reference(title, paragraphs)
        clean.append((render(title, paragraphs, dpi=300, font_path=font), ref))
        page = render(title, paragraphs, dpi=150, font_path=font)
        noisy.append((degraded(page, angle=SKEWS[number % len(SKEWS)], seed=number), ref))
        shot = render(title, paragraphs, dpi=96, font_path=font, ink=(225, 228, 232), paper=(43, 58, 85))
        screen.append((shot, ref))
    return {"clean_300dpi": clean, "noisy_150dpi": noisy, "screen_96dpi": screen}


def best(results: dict) -> dict:
    """Per condition, the engine (run) with the lowest CER and the one with the least CPU a page."""
    out = {}
    for condition in {name for runs in results.values() for name in runs}:
        runs = {label: r[condition] for label, r in results.items() if condition in r}
        out[condition] = {
            "lowest_cer": min(runs, key=lambda label: runs[label]["cer"]),
            "least_cpu": min(runs, key=lambda label: runs[label]["cpu_s_per_page"]),
        }
    return dict(sorted(out.items()))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pages", type=int, default=4)
    parser.add_argument("--engines", default="rapidocr,tesseract")
    parser.add_argument("--threads", default="", help="RapidOCR onnxruntime thread counts to compare, e.g. 1,2")
    parser.add_argument("--deskew", action="store_true", help="also read the noisy pages deskewed")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    django_setup()
    from knowledge.ingestion import ocr

    pages = conditions(page_texts(args.pages))
    engines = args.engines.split(",")
    # First, while this process has loaded no engine (what a child inherits changes its growth).
    memory = {engine: child_memory(engine, pages["clean_300dpi"][0][0]) for engine in engines}
    results: dict = {}
    for engine in engines:
        runs = [(engine, None)]
        if engine == "rapidocr" and args.threads:
            runs = [(f"rapidocr_{n}_threads", int(n)) for n in args.threads.split(",")]
        for label, threads in runs:
            if threads:
                ocr.RAPIDOCR_OPTIONS["EngineConfig.onnxruntime.intra_op_num_threads"] = threads
                ocr._rapidocr_engine = None  # made again with these threads
            results[label] = {name: read_pages(engine, group) for name, group in pages.items()}
            if args.deskew:
                results[label]["noisy_150dpi_deskewed"] = read_pages(engine, pages["noisy_150dpi"], deskew=True)
    report = {
        "benchmark": "ocr",
        "pages_per_condition": args.pages,
        "reference_chars_per_page": round(statistics.mean(len(ref) for _, ref in pages["clean_300dpi"])),
        "targets": {"clean_300dpi_cer": 0.03, "noisy_150dpi_cer": 0.08},
        "engines": results,
        "best": best(results),
        "parse_child_memory_first_clean_page": memory,
        "machine": {
            "cpus": os.cpu_count(),
            "load_average_1m_at_end": round(os.getloadavg()[0], 2),
            "python": platform.python_version(),
            "kernel": platform.release(),
        },
    }
    out = json.dumps(report, indent=2)
    print(out)
    if args.out:
        args.out.write_text(out + "\n")


if __name__ == "__main__":
    main()
