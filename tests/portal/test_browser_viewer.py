"""The cited page of a PDF in a real browser (Playwright driving Debian's chromium): a member asks,
follows the citation that says "p. 2", and sees page 2 of the original rendered by pdf.js with the
cited line highlighted, under the site's Content-Security-Policy with no violation reported.
Skipped, with the reason, without ``/usr/bin/chromium`` (the same rule as ``test_browser.py``).
"""

import io
import shutil

import pytest
from django.urls import reverse
from playwright.sync_api import expect, sync_playwright

from knowledge.ingestion.readers import ReadDocument
from knowledge.models import Document
from knowledge.services import documents_ingest
from tests.api.test_pages import harbour_pdf, harbour_splitter, paged_document
from tests.factories import SourceFactory
from tests.portal.test_browser import CHROMIUM, db_read, sign_in

pytestmark = pytest.mark.skipif(
    shutil.which(CHROMIUM) is None, reason=f"no chromium at {CHROMIUM} (apt-get install chromium)"
)


@pytest.fixture(autouse=True)
def data_dir(settings, tmp_path):
    """Originals are written under a temporary KB_DATA_DIR, never the real one."""
    settings.KB_DATA_DIR = tmp_path / "data"
    return settings.KB_DATA_DIR


@pytest.fixture
def manual(corpus):
    """The harbour manual (three pages) ingested with its original, kept once the ingestion commits."""
    documents_ingest(
        tenant=corpus,
        source=SourceFactory(tenant=corpus, name="manuals"),
        documents=[paged_document(original=harbour_pdf())],
        splitter=harbour_splitter(),
    )
    return Document.objects.for_tenant(corpus).get(external_id="manuals/harbour")


@pytest.fixture
def plain_copy(manual, corpus):
    """A copy of the manual whose reader gave no line boxes (only ``page_starts``), in a source of its own."""
    plain = paged_document(external_id="manuals/plain", original=harbour_pdf())
    del plain.metadata["regions"]
    plain.text += "\n\nA copy without line boxes."  # not an exact duplicate of the manual
    source = SourceFactory(tenant=corpus, name="copies")
    documents_ingest(tenant=corpus, source=source, documents=[plain], splitter=harbour_splitter())
    return Document.objects.for_tenant(corpus).get(external_id="manuals/plain")


def jpx_scan_pdf() -> bytes:
    """A one-page PDF whose only content is a picture in JPEG 2000 (a black band on white, as a
    scanned page), written by hand: reportlab re-encodes pictures, never as JPEG 2000."""
    from PIL import Image, ImageDraw

    picture = Image.new("L", (300, 200), 255)
    ImageDraw.Draw(picture).rectangle((30, 80, 270, 120), fill=0)
    jpx = io.BytesIO()
    picture.save(jpx, "JPEG2000")
    drawing = b"q 300 0 0 200 0 0 cm /Scan Do Q"
    objects = [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
        b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 300 200] /Resources << /XObject << /Scan 4 0 R >> >>"
        b" /Contents 5 0 R >>",
        b"<< /Type /XObject /Subtype /Image /Width 300 /Height 200 /Filter /JPXDecode /Length %d >>\nstream\n"
        % len(jpx.getvalue())
        + jpx.getvalue()
        + b"\nendstream",
        b"<< /Length %d >>\nstream\n%s\nendstream" % (len(drawing), drawing),
    ]
    pdf, offsets = bytearray(b"%PDF-1.7\n"), []
    for number, body in enumerate(objects, start=1):
        offsets.append(len(pdf))
        pdf += b"%d 0 obj\n%s\nendobj\n" % (number, body)
    table = len(pdf)
    pdf += b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1)
    pdf += b"".join(b"%010d 00000 n \n" % offset for offset in offsets)
    pdf += b"trailer\n<< /Size %d /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (len(objects) + 1, table)
    return bytes(pdf)


@pytest.fixture
def scan(corpus):
    """A scanned notice whose page is a JPEG 2000 picture, with its original kept."""
    notice = ReadDocument(
        external_id="scans/notice",
        title="Scanned notice",
        text="Scanned notice\n\nThe quay closes at dusk.",
        metadata={"pages": 1, "page_starts": [0]},
        original=jpx_scan_pdf(),
    )
    documents_ingest(tenant=corpus, source=SourceFactory(tenant=corpus, name="scans"), documents=[notice])
    return Document.objects.for_tenant(corpus).get(external_id="scans/notice")


@pytest.fixture
def browser(live_server, manual, member):
    """Chromium, launched once the database is set up (see ``test_browser.browser``)."""
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        yield browser
        browser.close()


def watched_page(browser):
    """A new page and the list its CSP violations and page errors are appended to."""
    page = browser.new_page(viewport={"width": 1100, "height": 900})
    problems: list[str] = []
    page.on("console", lambda m: problems.append(m.text) if "Content Security Policy" in m.text else None)
    page.on("pageerror", lambda e: problems.append(str(e)))
    return page, problems


def highlighted_text(page, number: int) -> list[str]:
    """The text-layer spans of page ``number`` whose centre lies inside a highlight box."""
    return page.evaluate(
        """(number) => {
            const box = document.querySelector(`.pdf-page[data-page="${number}"]`);
            const marks = [...box.querySelectorAll("mark.hit")].map((m) => m.getBoundingClientRect());
            return [...box.querySelectorAll(".textLayer span")].filter((span) => {
                const r = span.getBoundingClientRect();
                const x = r.left + r.width / 2, y = r.top + r.height / 2;
                return marks.some((m) => x >= m.left && x <= m.right && y >= m.top && y <= m.bottom);
            }).map((span) => span.textContent);
        }""",
        number,
    )


def inked_pixels(page, number: int) -> int:
    """How many dark pixels the canvas of page ``number`` has under its highlight boxes (the text drawn)."""
    return page.evaluate(
        """(number) => {
            const box = document.querySelector(`.pdf-page[data-page="${number}"]`);
            const canvas = box.querySelector("canvas"), context = canvas.getContext("2d");
            const ratio = canvas.width / canvas.getBoundingClientRect().width, origin = canvas.getBoundingClientRect();
            let dark = 0;
            for (const mark of box.querySelectorAll("mark.hit")) {
                const r = mark.getBoundingClientRect();
                const pixels = context.getImageData((r.left - origin.left) * ratio, (r.top - origin.top) * ratio,
                    Math.max(1, r.width * ratio), Math.max(1, r.height * ratio)).data;
                for (let i = 0; i < pixels.length; i += 4) if (pixels[i] < 128 && pixels[i + 3] > 0) dark += 1;
            }
            return dark;
        }""",
        number,
    )


def test_a_cited_page_opens_with_the_passage_highlighted_and_no_policy_violation(
    transactional_db, live_server, manual, member, browser
):
    page, problems = watched_page(browser)
    sign_in(page, live_server.url, member)
    page.fill("textarea[name=question]", "Who calibrates the tide gauge every Tuesday?")
    page.click("#ask-form button[type=submit]")
    cited = page.locator("#answer-area ol.citations li").filter(has=page.locator("span.pages", has_text="p. 2"))
    expect(cited.first).to_be_visible(timeout=60_000)
    cited.first.locator("a").first.click()

    page.wait_for_url(f"{live_server.url}{reverse('portal:document-view', args=[manual.pk])}?version=1&chunk=1")
    expect(page.locator("#viewer")).to_have_attribute("data-state", "ready", timeout=30_000)
    expect(page.locator("#viewer-where")).to_have_text("Page 2 of 3")
    expect(page.locator(".pdf-page")).to_have_count(1)
    expect(page.locator('.pdf-page[data-page="2"] mark.hit')).to_have_count(1)
    expect(page.locator('.pdf-page[data-page="2"] mark.hit')).to_be_in_viewport()
    assert " ".join(highlighted_text(page, 2)) == "The tide gauge is calibrated every Tuesday by the harbour master."
    assert inked_pixels(page, 2) > 50  # pdf.js drew the line under the box

    page.get_by_role("button", name="Next page →").click()
    expect(page.locator("#viewer-where")).to_have_text("Page 3 of 3")
    expect(page.locator('.pdf-page[data-page="3"]')).to_be_visible()
    expect(page.locator("mark.hit")).to_have_count(0)  # the cited chunk is on page 2 only

    assert problems == []


def test_a_passage_across_two_pages_is_highlighted_on_both(transactional_db, live_server, manual, member, browser):
    page, problems = watched_page(browser)
    sign_in(page, live_server.url, member)
    page.goto(f"{live_server.url}{reverse('portal:document-view', args=[manual.pk])}?version=1&chunk=2")
    expect(page.locator("#viewer")).to_have_attribute("data-state", "ready", timeout=30_000)
    expect(page.locator("#viewer-where")).to_have_text("Pages 2-3 of 3")
    assert highlighted_text(page, 2) == ["The dredging contract with Quillmarsh Works runs until"]
    assert highlighted_text(page, 3) == ["the end of the autumn season and covers the eastern basin."]
    title = db_read(lambda: Document.objects.get(pk=manual.pk).title)
    expect(page.locator("h1")).to_have_text(title)
    assert problems == []


def test_without_line_boxes_the_text_layers_spans_of_the_passage_are_highlighted(
    transactional_db, live_server, plain_copy, member, browser
):
    page, problems = watched_page(browser)
    sign_in(page, live_server.url, member)
    page.goto(f"{live_server.url}{reverse('portal:document-view', args=[plain_copy.pk])}?version=1&chunk=1")
    expect(page.locator("#viewer")).to_have_attribute("data-state", "ready", timeout=30_000)
    expect(page.locator("mark.hit")).to_have_count(0)
    marked = page.locator('.pdf-page[data-page="2"] .textLayer span.hit')
    expect(marked).to_have_text(["The tide gauge is calibrated every Tuesday by the harbour master."])
    assert problems == []


def test_a_scanned_page_in_jpeg_2000_is_drawn_by_pdfjs_javascript_decoder(
    transactional_db, live_server, scan, member, browser
):
    page, problems = watched_page(browser)
    sign_in(page, live_server.url, member)
    page.goto(f"{live_server.url}{reverse('portal:document-view', args=[scan.pk])}?version=1&chunk=0")
    expect(page.locator("#viewer")).to_have_attribute("data-state", "ready", timeout=30_000)
    dark = page.evaluate(
        """() => {
            const canvas = document.querySelector('.pdf-page[data-page="1"] canvas');
            const pixels = canvas.getContext("2d").getImageData(0, 0, canvas.width, canvas.height).data;
            let dark = 0;
            for (let i = 0; i < pixels.length; i += 4) if (pixels[i] < 64 && pixels[i + 3] > 0) dark += 1;
            return dark / (canvas.width * canvas.height);
        }"""
    )
    assert 0.1 < dark < 0.3  # the black band: 240 x 40 of 300 x 200 (16 %)
    assert problems == []
