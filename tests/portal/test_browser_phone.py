"""The portal on a phone (390 x 844, Playwright driving Debian's chromium): nothing runs off the
screen. Skipped, with the reason, without ``/usr/bin/chromium`` (the same rule as ``test_browser.py``).

The member is the widest case the header has: staff (an Admin link), two tenants (the tenant
switcher) and a long username; the ask page shows an answer with its citations and trace.
"""

import shutil

import pytest
from django.urls import reverse
from playwright.sync_api import expect, sync_playwright

from tests.factories import MembershipFactory, UserFactory
from tests.portal.test_browser import CHROMIUM, sign_in

pytestmark = pytest.mark.skipif(
    shutil.which(CHROMIUM) is None, reason=f"no chromium at {CHROMIUM} (apt-get install chromium)"
)

PHONE = {"width": 390, "height": 844}

# Every rendered element whose box leaves the viewport sideways, unless it sits in a scrolling
# container of its own (which scrolls, and so does not widen the page); and the page's width.
OVERFLOW = """() => {
  const width = window.innerWidth;
  const scrolls = (el) => {
    for (let up = el.parentElement; up && up !== document.body; up = up.parentElement) {
      const x = getComputedStyle(up).overflowX;
      if (x === "auto" || x === "scroll") return true;
    }
    return false;
  };
  const name = (el) => el.tagName.toLowerCase() + (el.id ? "#" + el.id : "")
    + (el.className && typeof el.className === "string" ? "." + el.className.trim().split(/\\s+/).join(".") : "");
  const out = [];
  for (const el of document.body.querySelectorAll("*")) {
    const box = el.getBoundingClientRect();
    if (box.width === 0 && box.height === 0) continue;
    if ((box.right > width + 0.5 || box.left < -0.5) && !scrolls(el)) {
      out.push(`${name(el)} ${Math.round(box.left)}..${Math.round(box.right)}`);
    }
  }
  const header = document.querySelector("header .bar").getBoundingClientRect();
  return {page: document.documentElement.scrollWidth, width, header: header.right, over: out};
}"""


@pytest.fixture
def staff_of_two_tenants(corpus, other_tenant_corpus):
    """A staff member of ``corpus`` and of ``other``, with a long username."""
    user = UserFactory(username="alexandra.vanderberg-longname", is_staff=True)
    MembershipFactory(user=user, tenant=corpus)
    MembershipFactory(user=user, tenant=other_tenant_corpus)
    return user


@pytest.fixture
def browser(live_server, staff_of_two_tenants):
    """Chromium, launched once the database is set up (see ``test_browser.browser``)."""
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        yield browser
        browser.close()


def assert_nothing_overflows(page, name: str, screenshots) -> None:
    page.screenshot(path=str(screenshots / f"{name}.png"), full_page=True)
    found = page.evaluate(OVERFLOW)
    assert found["width"] == PHONE["width"]
    assert found["page"] <= found["width"], f"{name}: the page is {found['page']} px wide: {found['over']}"
    assert found["header"] <= found["width"], f"{name}: the header ends at {found['header']} px"
    assert found["over"] == [], f"{name}: beyond the screen's edges: {found['over']}"


def test_on_a_phone_the_header_wraps_and_no_page_runs_off_the_screen(
    transactional_db, live_server, staff_of_two_tenants, corpus, browser, tmp_path
):
    page = browser.new_page(viewport=PHONE)
    sign_in(page, live_server.url, staff_of_two_tenants)
    assert_nothing_overflows(page, "ask", tmp_path)
    header = page.locator("header")
    for link in ("Conversations", "Sources", "Profile", "Admin"):
        expect(header.get_by_role("link", name=link, exact=True)).to_be_in_viewport()
    expect(header.get_by_role("button", name="Sign out")).to_be_in_viewport()
    expect(header.get_by_label("Tenant")).to_be_in_viewport()

    page.get_by_label("Tenant").select_option(corpus.slug)  # the tenant with the pasta, tyre, expenses
    page.get_by_role("button", name="Switch").click()
    expect(page.locator("h1")).to_have_text(f"Ask {corpus.name}")  # the page, loaded anew
    page.fill("textarea[name=question]", "How do I patch a bicycle tyre puncture?")
    page.click("#ask-form button[type=submit]")
    expect(page.locator("#answer-area ol.citations a").first).to_be_visible(timeout=30_000)
    page.locator("#answer-area details.trace summary").click()  # the trace panel, open
    assert_nothing_overflows(page, "ask-answered", tmp_path)

    for name in ("conversations", "sources", "profile"):
        page.goto(live_server.url + reverse(f"portal:{name}"))
        if name == "conversations":
            page.locator("ol.conversations summary").first.click()  # a conversation, unfolded
            expect(page.locator("ol.conversations .turn-question").first).to_be_visible()
        assert_nothing_overflows(page, name, tmp_path)
