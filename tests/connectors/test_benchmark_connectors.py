"""The service connectors' benchmark (``benchmarks/connectors.py``) run end to end on tiny worlds."""

import importlib.util
import json
from pathlib import Path

import pytest
from django.conf import settings

pytestmark = pytest.mark.django_db

BENCHMARKS = Path(settings.BASE_DIR) / "benchmarks"
MEASURED = {"seconds", "new", "updated", "unchanged", "deleted", "failed", "requests", "requests_by_path"}


@pytest.fixture
def benchmark(monkeypatch):
    """The benchmark script as a module (its ``_setup`` and ``_toolkit`` importable while the test runs)."""
    monkeypatch.syspath_prepend(str(BENCHMARKS))
    spec = importlib.util.spec_from_file_location("benchmark_connectors", BENCHMARKS / "connectors.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_a_quick_run_reports_fetch_and_incremental_figures_with_requests_that_do_not_grow_with_the_documents(
    benchmark, tmp_path
):
    out = tmp_path / "connectors.json"

    result = benchmark.main(
        ["--slack-messages", "200", "--confluence-pages", "50", "--skip-full-sync", "--out", str(out)]
    )

    assert json.loads(out.read_text()) == result
    assert result["full_sync"] == "skipped"
    for kind, size, sizes in (("slack", "messages", (200, 400)), ("confluence", "contents", (50, 100))):
        figures = result[kind]
        assert (figures["world"][size], figures["world_double"][size]) == sizes
        for fetch in (figures["fetch"], figures["fetch_double"]):
            assert fetch["documents"] > 0 and fetch["requests"] > 0 and fetch["documents_per_s"] > 0
        assert figures["fetch_double"]["documents"] > figures["fetch"]["documents"]
        for incremental in (figures["incremental"], figures["incremental_double"]):
            assert MEASURED | {"changes", "chunks", "embed_seconds", "embed_share"} <= set(incremental)
            assert incremental["new"] + incremental["updated"] == 10  # every change found
            assert incremental["failed"] == 0
        assert figures["incremental_double"]["requests"] == figures["incremental"]["requests"]
        assert figures["incremental_requests_grow"] is False
        assert not {"full_sync", "permissions"} & set(figures)
