"""The documents benchmark (``benchmarks/documents.py``) run end to end on its quick set."""

import importlib.util
import json
import sys
from pathlib import Path

import pytest
from django.conf import settings

pytestmark = pytest.mark.django_db

BENCHMARKS = Path(settings.BASE_DIR) / "benchmarks"


@pytest.fixture
def benchmark(monkeypatch):
    """The benchmark script as a module (its ``_setup`` importable while the test runs)."""
    monkeypatch.syspath_prepend(str(BENCHMARKS))
    spec = importlib.util.spec_from_file_location("benchmark_documents", BENCHMARKS / "documents.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_a_quick_run_reports_every_figure_with_its_target_and_every_chunk_on_its_printed_pages(benchmark, tmp_path):
    out = tmp_path / "documents.json"

    result = benchmark.main(["--quick", "--out", str(out)])

    assert json.loads(out.read_text()) == result
    assert {"tables", "pages", "questions", "machine", "load_average"} <= set(result)
    for figure in ("tables", "pages", "questions"):
        assert {"share", "target", "met"} <= set(result[figure])
    assert set(result["tables"]["by_format"]) == {".pdf", ".docx", ".xlsx"}
    assert result["tables"]["cells"] == 3 * 2 * 6 * 4
    extractors = result["tables"]["pdf_extractors"]  # the PDF's tables by pdfplumber alone and by camelot
    assert extractors["pdfplumber"]["cells"] == 2 * 6 * 4 and extractors["pdfplumber"]["seconds_per_page"] > 0
    assert isinstance(extractors["camelot"]["available"], bool)  # measured, or said to be missing
    pages = result["pages"]
    assert pages["chunks"] > pages["pages"]  # several chunks a page, some across a page break
    assert pages["share"] == 1.0 and pages["met"] is True and pages["wrong_examples"] == []
    questions = result["questions"]
    assert questions["questions"] == 6
    assert questions["by_kind"].keys() == {"table_rows", "scanned_pages"}
    assert questions["seconds_per_question"] > 0


def test_without_camelot_the_comparison_says_it_is_unavailable_and_still_measures_pdfplumber(benchmark, monkeypatch):
    monkeypatch.setitem(sys.modules, "camelot", None)  # "import camelot" raises ImportError
    from _pdf_tables import compare_extractors

    tables = benchmark.make_tables(7, 1, 3, set())
    result = compare_extractors(benchmark.tables_pdf(tables), tables, benchmark.score_cells, repeat=1)

    assert result["camelot"]["available"] is False and "not installed" in result["camelot"]["reason"]
    assert result["pdfplumber"]["share"] == 1.0 and result["pdfplumber"]["cells"] == 3 * 4
