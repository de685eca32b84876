"""What opening a cited page costs the server: reading a version's kept line boxes and picking
those of the cited chunk (``knowledge.originals``), for versions of 1,000 to 50,000 lines (50,000:
the readers' cap), kept as the ``.npy`` array they are kept in and, for comparison, as JSON (the
reader's own form); and writing an original with its boxes (``knowledge.services.originals``).

Usage: python benchmarks/viewer_layout.py [--repeat 20] [--pdf-mb 5]

Synthetic lines: 45 a page, 60 characters each, as the PDF reader writes them; the cited chunk
is 12 lines in the middle. Files go to a temporary KB_DATA_DIR. Times are medians of
``--repeat`` runs in this process (wall, milliseconds). Prints one JSON object (also written to
``benchmarks/results/viewer_layout.json``).
"""

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

from _setup import ROOT, django_setup
from _toolkit import log

LINES_PER_PAGE, LINE_CHARS = 45, 60


def regions(count: int) -> list[list]:
    """``count`` line regions as the PDF reader writes them (page, box, start, end)."""
    rows = []
    for i in range(count):
        page, line = divmod(i, LINES_PER_PAGE)
        top = round(72 + 15.5 * line, 1)
        start = i * (LINE_CHARS + 1)
        rows.append([page + 1, 72.0, top, 523.4, round(top + 11.0, 1), start, start + LINE_CHARS])
    return rows


def median_ms(work, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        work()
        times.append((time.perf_counter() - started) * 1000)
    return round(statistics.median(times), 2)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeat", type=int, default=20)
    parser.add_argument("--pdf-mb", type=float, default=5.0)
    args = parser.parse_args()
    django_setup()
    from django.conf import settings

    from knowledge.originals import original_path, regions_get, regions_path
    from knowledge.pages import regions_array, regions_on_pages
    from knowledge.services.originals import _write

    settings.KB_DATA_DIR = Path(tempfile.mkdtemp(prefix="viewer-bench-"))
    data = b"%PDF-1.7\n" + b"0" * int(args.pdf_mb * 2**20)
    rows = []
    for count in (1_000, 10_000, 50_000):
        where = {"tenant_id": 1, "document_id": count, "number": 1}
        lines = regions(count)
        array = regions_array(lines)

        def write(where=where, array=array):
            _write(original_path(**where), data, regions_path(**where), array)

        def pick(where=where, count=count):
            middle = count // 2 * (LINE_CHARS + 1)
            return regions_on_pages(regions_get(**where), middle, middle + 12 * (LINE_CHARS + 1))

        as_json = regions_path(**where).with_suffix(".json")
        as_json.parent.mkdir(parents=True, exist_ok=True)
        as_json.write_text(json.dumps(lines, separators=(",", ":")))

        def pick_json(as_json=as_json, count=count):
            middle = count // 2 * (LINE_CHARS + 1)
            return regions_on_pages(
                regions_array(json.loads(as_json.read_text())), middle, middle + 12 * (LINE_CHARS + 1)
            )

        write_ms = median_ms(write, max(3, args.repeat // 4))
        boxes = pick()
        assert boxes == pick_json()
        log(f"{count} lines: {sum(len(b) for b in boxes.values())} boxes on pages {sorted(boxes)}")
        rows.append(
            {
                "lines": count,
                "npy_kb": round(regions_path(**where).stat().st_size / 1024, 1),
                "json_kb": round(as_json.stat().st_size / 1024, 1),
                "read_and_pick_boxes_ms": median_ms(pick, args.repeat),
                "read_and_pick_boxes_json_ms": median_ms(pick_json, args.repeat),
                f"write_{args.pdf_mb:g}_mb_original_and_boxes_ms": write_ms,
            }
        )
    result = {"benchmark": "viewer_layout", "repeat": args.repeat, "layouts": rows}
    text = json.dumps(result, indent=2)
    (ROOT / "benchmarks" / "results" / "viewer_layout.json").write_text(text + "\n")
    print(text)


if __name__ == "__main__":
    main()
