"""The Sources page in Chromium (Playwright, Debian's chromium): a running sync's progress moves
without a reload; at 1280 px the table reads as a table (no header word split across lines), and
on a phone each source stacks. Skipped, with the reason, without ``/usr/bin/chromium``."""

import shutil
import threading

import pytest
from django.urls import reverse
from playwright.sync_api import expect, sync_playwright

from knowledge.models import Source, SyncRun
from tests.factories import SourceFactory
from tests.portal.test_browser import CHROMIUM, sign_in

pytestmark = pytest.mark.skipif(
    shutil.which(CHROMIUM) is None, reason=f"no chromium at {CHROMIUM} (apt-get install chromium)"
)

DESKTOP = {"width": 1280, "height": 800}
PHONE = {"width": 390, "height": 844}
PROGRESS = {"stage": "ingesting", "items": 383, "done": 96, "chunks": 2300, "chunks_per_s": 21.7, "eta_s": 205}

# Per header cell: its text, whether its content is wider than the cell, and its line count.
HEADER_CELLS = """() => [...document.querySelectorAll("table.sources thead th")].map((th) => {
  const range = document.createRange();
  range.selectNodeContents(th);
  const lines = new Set([...range.getClientRects()].map((r) => Math.round(r.top))).size;
  return {text: th.textContent, over: th.scrollWidth > th.clientWidth, lines};
})"""


def outside_the_event_loop(update) -> None:
    """Run a database ``update`` in a thread of its own: Playwright's sync API keeps an event
    loop in the test's thread, where Django refuses database calls."""
    worker = threading.Thread(target=update)
    worker.start()
    worker.join()


@pytest.fixture
def syncing(tenant):
    """Five folder sources as the demo has them, ``releases`` halfway through its sync."""
    for name in ("howto", "intro-faq", "topics", "ref"):
        source = SourceFactory(tenant=tenant, name=name, kind=Source.Kind.FOLDER, location=f"/srv/{name}")
        SyncRun.objects.create(tenant=tenant, source=source, status=SyncRun.Status.DONE, new=34, unchanged=2)
    releases = SourceFactory(tenant=tenant, name="releases", kind=Source.Kind.FOLDER, location="/srv/releases")
    return SyncRun.objects.create(tenant=tenant, source=releases, status=SyncRun.Status.RUNNING, progress=PROGRESS)


@pytest.fixture
def browser(live_server, syncing, member):
    """Chromium, launched once the database is set up (see ``test_browser.browser``)."""
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        yield browser
        browser.close()


def test_a_syncs_progress_moves_on_the_sources_page_without_a_reload(
    transactional_db, live_server, member, syncing, browser
):
    page = browser.new_page(viewport=DESKTOP)
    sign_in(page, live_server.url, member)
    page.goto(live_server.url + reverse("portal:sources"))
    releases = page.locator("table.sources tr", has=page.locator('th[scope=row]:text-is("releases")'))
    expect(releases).to_contain_text("96 of 383 documents")
    page.evaluate("window.notReloaded = true")

    runs = SyncRun.objects.filter(pk=syncing.pk)
    outside_the_event_loop(lambda: runs.update(progress={**PROGRESS, "done": 300, "eta_s": 40}))
    expect(releases).to_contain_text("300 of 383 documents", timeout=10_000)
    expect(releases).to_contain_text("about 40 s left")
    outside_the_event_loop(lambda: runs.update(status=SyncRun.Status.DONE, progress={}, new=383))
    expect(releases).to_contain_text("Done: 383 new", timeout=10_000)

    assert page.evaluate("window.notReloaded") is True


def test_at_1280_px_the_sources_table_splits_no_header_word_and_on_a_phone_each_source_stacks(
    transactional_db, live_server, member, syncing, browser
):
    desktop = browser.new_page(viewport=DESKTOP)
    sign_in(desktop, live_server.url, member)
    desktop.goto(live_server.url + reverse("portal:sources"))

    cells = desktop.evaluate(HEADER_CELLS)
    assert [c["text"] for c in cells if c["over"] or c["lines"] != 1] == []
    assert desktop.locator("table.sources thead").is_visible()
    names = desktop.evaluate(HEADER_CELLS.replace("thead th", "tbody th"))
    assert [c["text"] for c in names if c["over"] or c["lines"] != 1] == []  # "releases" stays one word

    phone = browser.new_page(viewport=PHONE)
    sign_in(phone, live_server.url, member)
    phone.goto(live_server.url + reverse("portal:sources"))
    head = phone.locator("table.sources thead").bounding_box()
    assert head["width"] <= 1 and head["height"] <= 1  # hidden from sight, still read by a screen reader
    display = phone.locator('table.sources td[data-label="Documents"]').first.evaluate(
        "(td) => getComputedStyle(td).display"
    )
    assert display == "flex"  # a label-value line under the source's name
    assert phone.evaluate("document.documentElement.scrollWidth") <= PHONE["width"]
