"""Read time of the office and e-book readers (.docx, .pptx, .xlsx, .odt, .epub).

Usage: python benchmarks/office_readers.py [--rounds R]
Builds, in a temporary folder, the test suite's small files (tests/knowledge/test_office_readers.py)
and one larger file per format made with the same libraries: a .docx of 600 paragraphs under 30
headings with 30 tables of 10 rows, a .pptx of 40 slides with a 6-row table each, a .xlsx of 3
sheets of 5,000 rows by 6 columns, a .odt of 600 paragraphs under 30 headings with 30 tables, an
.epub of 20 chapters of 30 paragraphs. Times ``read_bytes`` on each: the first read in a fresh
process (library imports included) and the median of ``R`` reads after it. Prints one JSON object.
"""

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import date
from pathlib import Path

from _setup import ROOT, django_setup

SENTENCE = "The committee reviewed the proposal and agreed to fund the second phase of the project."


def make_large_docx(path: Path) -> None:
    import docx

    document = docx.Document()
    for h in range(30):
        document.add_heading(f"Part {h}", level=1)
        for p in range(20):
            document.add_paragraph(f"{SENTENCE} Paragraph {p} of part {h}.")
        table = document.add_table(rows=10, cols=4)
        for r, row in enumerate(table.rows):
            for c, cell in enumerate(row.cells):
                cell.text = f"r{r}c{c}"
    document.save(path)


def make_large_pptx(path: Path) -> None:
    from pptx import Presentation
    from pptx.util import Inches

    presentation = Presentation()
    for s in range(40):
        slide = presentation.slides.add_slide(presentation.slide_layouts[5])
        slide.shapes.title.text = f"Topic {s}"
        box = slide.shapes.add_textbox(Inches(1), Inches(1.5), Inches(8), Inches(1))
        box.text_frame.text = f"{SENTENCE} Slide {s}."
        table = slide.shapes.add_table(6, 3, Inches(1), Inches(3), Inches(8), Inches(2)).table
        for r in range(6):
            for c in range(3):
                table.cell(r, c).text = f"r{r}c{c}"
    presentation.save(path)


def make_large_xlsx(path: Path) -> None:
    import openpyxl

    workbook = openpyxl.Workbook(write_only=True)
    for s in range(3):
        sheet = workbook.create_sheet(f"Sheet {s}")
        sheet.append(["Id", "Name", "Amount", "Due", "Team", "Note"])
        for r in range(5000):
            sheet.append([r, f"Item {r}", r * 1.5, date(2025, 1 + r % 12, 1 + r % 28), f"Team {r % 7}", "ok"])
    workbook.save(path)


def make_large_odt(path: Path) -> None:
    from odf.opendocument import OpenDocumentText
    from odf.table import Table, TableCell, TableColumn, TableRow
    from odf.text import H, P

    document = OpenDocumentText()
    for h in range(30):
        document.text.addElement(H(outlinelevel=1, text=f"Part {h}"))
        for p in range(20):
            document.text.addElement(P(text=f"{SENTENCE} Paragraph {p} of part {h}."))
        table = Table(name=f"T{h}")
        table.addElement(TableColumn(numbercolumnsrepeated=4))
        for r in range(10):
            row = TableRow()
            for c in range(4):
                cell = TableCell()
                cell.addElement(P(text=f"r{r}c{c}"))
                row.addElement(cell)
            table.addElement(row)
        document.text.addElement(table)
    document.save(str(path))


def make_large_epub(path: Path) -> None:
    from ebooklib import epub

    book = epub.EpubBook()
    book.set_identifier("bench")
    book.set_title("Benchmark book")
    book.set_language("en")
    chapters = []
    for c in range(20):
        chapter = epub.EpubHtml(title=f"Chapter {c}", file_name=f"c{c}.xhtml", lang="en")
        paragraphs = "".join(f"<p>{SENTENCE} Paragraph {p}.</p>" for p in range(30))
        chapter.content = f"<html><body><h1>Chapter {c}</h1>{paragraphs}</body></html>"
        book.add_item(chapter)
        chapters.append(chapter)
    book.toc = chapters
    book.add_item(epub.EpubNcx())
    book.add_item(epub.EpubNav())
    book.spine = ["nav", *chapters]
    epub.write_epub(str(path), book)


def build(folder: Path) -> list[Path]:
    from tests.knowledge import test_office_readers as small

    files = [
        small.make_docx(folder / "small.docx"),
        small.make_pptx(folder / "small.pptx"),
        small.make_xlsx(folder / "small.xlsx"),
        small.make_odt(folder / "small.odt"),
        small.make_epub(folder / "small.epub"),
    ]
    for suffix, make in [
        ("docx", make_large_docx),
        ("pptx", make_large_pptx),
        ("xlsx", make_large_xlsx),
        ("odt", make_large_odt),
        ("epub", make_large_epub),
    ]:
        make(folder / f"large.{suffix}")
        files.append(folder / f"large.{suffix}")
    return files


def first_read_ms(path: Path) -> float:
    """The first read in a fresh process, the library's import included."""
    code = (
        "import sys, time; sys.path.insert(0, 'benchmarks'); from _setup import django_setup; django_setup(); "
        "from pathlib import Path; from knowledge.ingestion.readers import read_bytes; p = Path(sys.argv[1]); "
        "d = p.read_bytes(); t = time.perf_counter(); read_bytes(d, name=p.name); "
        "print((time.perf_counter() - t) * 1000)"
    )
    out = subprocess.run([sys.executable, "-c", code, str(path)], cwd=ROOT, capture_output=True, text=True, check=True)
    return float(out.stdout.strip().splitlines()[-1])


def main() -> None:
    django_setup()
    from knowledge.ingestion.readers import read_bytes

    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        for path in build(Path(tmp)):
            data = path.read_bytes()
            first = first_read_ms(path)
            times = []
            for _ in range(args.rounds):
                t = time.perf_counter()
                [document] = read_bytes(data, name=path.name)
                times.append((time.perf_counter() - t) * 1000)
            results.append(
                {
                    "file": path.name,
                    "bytes": len(data),
                    "characters": len(document.text),
                    "sections": len(document.sections),
                    "first_read_ms": round(first, 1),
                    "median_read_ms": round(statistics.median(times), 1),
                }
            )
    print(json.dumps({"rounds": args.rounds, "results": results}, indent=2))


if __name__ == "__main__":
    main()
