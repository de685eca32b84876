"""A cited figure in a real browser (Playwright driving Debian's chromium): a member asks about the
lighthouse chart, and the answer's citation shows the chart's thumbnail, loaded (a picture with
pixels) under the site's Content-Security-Policy with no violation reported. Skipped, with the
reason, without ``/usr/bin/chromium`` (the same rule as ``test_browser.py``).
"""

import shutil

import pytest
from playwright.sync_api import expect, sync_playwright

from knowledge.ingestion.readers import read_bytes
from knowledge.services import documents_ingest
from tests.factories import SourceFactory
from tests.portal.test_browser import CHROMIUM, sign_in
from tests.portal.test_figures import CAPTION, QUESTION, lighthouse_pdf

pytestmark = pytest.mark.skipif(
    shutil.which(CHROMIUM) is None, reason=f"no chromium at {CHROMIUM} (apt-get install chromium)"
)


@pytest.fixture(autouse=True)
def data_dir(settings, tmp_path):
    """Originals (and figures' pictures) are written under a temporary KB_DATA_DIR."""
    settings.KB_DATA_DIR = tmp_path / "data"
    return settings.KB_DATA_DIR


@pytest.fixture
def lighthouse(corpus):
    """The lighthouse report (one page, a captioned chart) ingested with its original."""
    documents = read_bytes(lighthouse_pdf(), name="reports/lighthouse.pdf")
    documents_ingest(tenant=corpus, source=SourceFactory(tenant=corpus, name="reports"), documents=documents)


@pytest.fixture
def browser(live_server, lighthouse, member):
    """Chromium, launched once the database is set up (see ``test_browser.browser``)."""
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        yield browser
        browser.close()


def test_the_cited_charts_thumbnail_loads_beside_its_citation(transactional_db, live_server, member, browser):
    page = browser.new_page(viewport={"width": 1100, "height": 900})
    problems: list[str] = []
    page.on("console", lambda m: problems.append(m.text) if "Content Security Policy" in m.text else None)
    page.on("pageerror", lambda e: problems.append(str(e)))
    sign_in(page, live_server.url, member)
    page.fill("textarea[name=question]", QUESTION)
    page.click("#ask-form button[type=submit]")

    thumbnail = page.locator("#answer-area ol.citations figure.citation-figure img")
    expect(thumbnail.first).to_be_attached(timeout=60_000)
    expect(thumbnail.first).to_have_attribute("alt", CAPTION)
    thumbnail.first.scroll_into_view_if_needed()
    page.wait_for_function("(img) => img.complete", arg=thumbnail.first.element_handle(), timeout=30_000)
    assert thumbnail.first.evaluate("(img) => img.naturalWidth") > 0
    assert problems == []
