"""Access rules in a real browser (Playwright driving Debian's chromium, as ``test_browser.py``): a
document restricted to a group never shows to a member outside the group, on the ask page or the
sources page, and does show to a member of the group."""

import shutil

import pytest
from django.urls import reverse
from playwright.sync_api import expect, sync_playwright

from tests.acl_world import tenant_world
from tests.portal.test_browser import CHROMIUM, sign_in

pytestmark = pytest.mark.skipif(
    shutil.which(CHROMIUM) is None, reason=f"no chromium at {CHROMIUM} (apt-get install chromium)"
)


@pytest.fixture
def world(transactional_db):
    return tenant_world("acme")


@pytest.fixture
def browser(live_server, world):
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        yield browser
        browser.close()


def ask_and_read_citations(page, live_server) -> str:
    page.fill("textarea[name=question]", "How do I patch a bicycle tyre puncture?")
    page.click("#ask-form button[type=submit]")
    citations = page.locator("#answer-area ol.citations")
    expect(citations.locator("a").first).to_be_visible(timeout=30_000)
    return citations.inner_text()


def test_a_group_restricted_document_shows_only_to_members_of_the_group(world, live_server, browser):
    board, public = world.documents["board"].title, world.documents["public"].title

    outside = browser.new_context().new_page()
    sign_in(outside, live_server.url, world.users["member"])
    cited = ask_and_read_citations(outside, live_server)
    assert public in cited and board not in cited
    outside.goto(live_server.url + reverse("portal:sources"))
    expect(outside.locator("table.sources tbody th")).to_have_text(["handbook"])  # no "board" source
    outside.goto(live_server.url + reverse("portal:document", args=[world.documents["board"].pk]))
    expect(outside.locator("body")).not_to_contain_text(board)

    inside = browser.new_context().new_page()  # a separate cookie jar: a second signed-in user
    sign_in(inside, live_server.url, world.users["board"])
    cited = ask_and_read_citations(inside, live_server)
    assert board in cited
    inside.goto(live_server.url + reverse("portal:sources"))
    expect(inside.locator("table.sources tbody th")).to_have_text(["board", "handbook"])
    inside.goto(live_server.url + reverse("portal:document", args=[world.documents["board"].pk]))
    expect(inside.locator("h1")).to_contain_text(board)
