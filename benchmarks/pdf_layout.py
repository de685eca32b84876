"""The PDF layout reader against the plain text of pypdf it replaced: what each keeps of the samples'
layout, and the time a page takes.

Usage: python benchmarks/pdf_layout.py [--pages N] [--rounds R] [--ocr]
Builds the test suite's PDFs (``tests/knowledge/pdf_samples.py``): the six-page handbook (running
header and footer, two columns, a hyphenated word, a table across a page break, a figure with its
caption, a scanned page) and a text PDF of ``N`` pages (45 lines, about 2,800 characters a page).
For the handbook, checks what each reader's text keeps (the scanned page only with ``--ocr``, at
``KB_OCR_DPI``). For the text PDF, times pypdf's ``extract_text`` and ``read_pdf`` in this process
(CPU and wall seconds a page, the median of ``R`` rounds) and ``read_bytes`` once (the sandbox's
child included), and projects a 2,000-page PDF. Prints one JSON object.
"""

import argparse
import io
import json
import os
import re
import statistics
import time
from datetime import date

from _setup import django_setup


def layout_checks(text: str, *, with_ocr: bool) -> dict:
    """What a reader's ``text`` of the handbook keeps, one boolean per feature."""
    from tests.knowledge import pdf_samples

    lines = text.split("\n")
    left = [lines.index(line) if line in lines else -1 for line in pdf_samples.LEFT_COLUMN]
    right = [lines.index(line) if line in lines else -1 for line in pdf_samples.RIGHT_COLUMN]
    checks = {
        "columns_in_order": -1 not in left + right and left == sorted(left) and max(left) < min(right),
        "running_header_footer_gone": "Internal use only" not in text and not re.search(r"Page \d of 6", text),
        "hyphenated_word_joined": "incident procedure" in text,
        "table_row_on_one_line": "| Quillbrook gateway | 7,450 | Dana Petrov |" in lines,
        "figure_caption_kept": f"[Figure: {pdf_samples.FIGURE_CAPTION}]" in lines,
    }
    if with_ocr:
        checks["scanned_page_read"] = "Zephyr vault code is 4471" in text
    return checks


def timed(function, rounds: int) -> tuple[float, float, object]:
    """(median CPU seconds, median wall seconds, the last result) of ``rounds`` calls."""
    cpu, wall, result = [], [], None
    for _ in range(rounds):
        started_cpu, started = time.process_time(), time.perf_counter()
        result = function()
        cpu.append(time.process_time() - started_cpu)
        wall.append(time.perf_counter() - started)
    return statistics.median(cpu), statistics.median(wall), result


def pypdf_text(data: bytes) -> str:
    from pypdf import PdfReader

    return "\n\n".join(page.extract_text() or "" for page in PdfReader(io.BytesIO(data)).pages)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--pages", type=int, default=50)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--ocr", action="store_true", help="read the scanned page too (slow)")
    args = parser.parse_args()
    django_setup()
    from django.conf import settings
    from django.test import override_settings

    from knowledge.ingestion.pdf import read_pdf
    from knowledge.ingestion.readers import read_bytes
    from tests.knowledge import pdf_samples

    handbook = pdf_samples.handbook_pdf()
    engine = settings.KB_OCR_ENGINE if args.ocr else "off"
    with override_settings(KB_OCR_ENGINE=engine):
        layout = read_pdf(handbook, name="handbook.pdf", external_id="handbook", uri="")
    text_pdf = pdf_samples.marked_pdf(args.pages, lines_per_page=45)
    load_before = os.getloadavg()[0]
    pypdf_cpu, pypdf_wall, plain = timed(lambda: pypdf_text(text_pdf), args.rounds)
    layout_cpu, layout_wall, read = timed(
        lambda: read_pdf(text_pdf, name="text.pdf", external_id="text", uri=""), args.rounds
    )
    _, sandbox_wall, _ = timed(lambda: read_bytes(text_pdf, name="text.pdf"), 1)
    per_page = {
        "pypdf_cpu_s": round(pypdf_cpu / args.pages, 4),
        "pypdf_wall_s": round(pypdf_wall / args.pages, 4),
        "layout_cpu_s": round(layout_cpu / args.pages, 4),
        "layout_wall_s": round(layout_wall / args.pages, 4),
        "layout_in_sandbox_wall_s": round(sandbox_wall / args.pages, 4),
    }
    print(
        json.dumps(
            {
                "benchmark": "pdf_layout",
                "date": date.today().isoformat(),
                "cores": os.cpu_count(),
                "load_average_before_after": [round(load_before, 1), round(os.getloadavg()[0], 1)],
                "handbook_kept": {
                    "pypdf (before)": layout_checks(pypdf_text(handbook), with_ocr=args.ocr),
                    "layout reader": layout_checks(layout.text, with_ocr=args.ocr),
                },
                "text_pdf": {
                    "pages": args.pages,
                    "characters_per_page": round(len(read.text) / args.pages),
                    "pypdf_characters_per_page": round(len(plain) / args.pages),
                    "rounds": args.rounds,
                    "seconds_per_page": per_page,
                    "slowdown_cpu": round(layout_cpu / max(pypdf_cpu, 1e-9), 1),
                    "projected_2000_pages_cpu_s": round(2000 * layout_cpu / args.pages),
                },
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
