"""Two table extractors on the same PDF, for ``benchmarks/documents.py``: pdfplumber's table finder
as the PDF reader uses it (``knowledge.ingestion.pdf.tables.page_tables``) and camelot's lattice
mode (PyPI ``camelot-py``, in ``requirements-bench.txt``, not in the project's requirements).

Each extractor reads every page of the PDF, in this process (no sandbox), and its tables' rows are
written as Markdown rows and scored as the reader's text is (``score_cells``: a known cell counts
when it stands in the row that starts with its row's key, at its header column). Seconds per page:
the best of ``repeat`` runs of the whole file (opening it included), divided by its pages. Without
camelot installed (or when it fails) its entry says so (``available`` false, ``reason``).
"""

from __future__ import annotations

import io
import os
import tempfile
import time
from collections.abc import Callable


def pdfplumber_rows(pdf: bytes) -> tuple[list[list[str]], int, int]:
    """(Rows of every table, tables found, pages) by ``knowledge.ingestion.pdf.tables.page_tables``."""
    import pdfplumber

    from knowledge.ingestion.pdf.tables import page_tables

    rows: list[list[str]] = []
    tables = 0
    with pdfplumber.open(io.BytesIO(pdf)) as document:
        for page in document.pages:
            for table in page_tables(page):
                tables += 1
                rows += table.rows
            page.close()
        return rows, tables, len(document.pages)


def camelot_rows(pdf: bytes) -> tuple[list[list[str]], int, int]:
    """(Rows of every table, tables found, pages) by ``camelot.read_pdf(flavor="lattice")``, each
    cell cleaned as the reader cleans pdfplumber's (``cell_text``). ``ImportError`` without camelot."""
    import camelot
    import pypdfium2

    from knowledge.ingestion.tables import cell_text

    handle, path = tempfile.mkstemp(suffix=".pdf")  # camelot reads a path
    try:
        with os.fdopen(handle, "wb") as file:
            file.write(pdf)
        found = camelot.read_pdf(path, pages="all", flavor="lattice")
        rows = [[cell_text(value) for value in row] for table in found for row in table.df.values.tolist()]
        document = pypdfium2.PdfDocument(pdf)
        pages = len(document)
        document.close()
        return [row for row in rows if any(row)], len(found), pages
    finally:
        os.unlink(path)


def _measure(extract: Callable[[bytes], tuple[list[list[str]], int, int]], pdf: bytes, tables, score, repeat: int):
    from knowledge.ingestion.pdf.tables import row_line

    best = float("inf")
    for _ in range(repeat):
        started = time.perf_counter()
        rows, found, pages = extract(pdf)
        best = min(best, time.perf_counter() - started)
    figure = score("\n".join(row_line(row) for row in rows), tables)
    return {
        "available": True,
        "cells": figure["cells"],
        "found": figure["found"],
        "share": figure["share"],
        "tables_found": found,
        "pages": pages,
        "seconds_per_page": round(best / pages, 4),
        "missed_examples": figure["missed_examples"],
    }


def compare_extractors(pdf: bytes, tables: list[list[list[str]]], score, *, repeat: int = 3) -> dict:
    """``{"pdfplumber": {...}, "camelot": {...}}`` on ``pdf`` holding ``tables`` (module docstring);
    ``score(text, tables)`` is the benchmark's ``score_cells``. camelot's entry is ``{"available":
    false, "reason": ...}`` when it is not installed or fails on the file."""
    result = {"pdfplumber": _measure(pdfplumber_rows, pdf, tables, score, repeat)}
    try:
        import camelot
    except ImportError as exc:
        result["camelot"] = {
            "available": False,
            "reason": f"not installed ({exc}); pip install -r requirements-bench.txt",
        }
        return result
    try:
        result["camelot"] = {"version": camelot.__version__, **_measure(camelot_rows, pdf, tables, score, repeat)}
    except Exception as exc:  # noqa: BLE001 - a benchmark reports an optional library's failure, whatever it is
        result["camelot"] = {"available": False, "reason": f"{type(exc).__name__}: {exc}"[:300]}
    return result
