"""The Content-Security-Policy in a real browser (Debian's chromium via Playwright): the portal's
streamed answer, the document page, the admin and the offline Swagger UI work and the browser
reports no blocked script, style or request.

Needs ``/usr/bin/chromium`` (scripts/test.sh installs it); skipped without it.
"""

import shutil

import pytest
from django.urls import reverse
from playwright.sync_api import expect, sync_playwright

from knowledge.models import Document

CHROMIUM = "/usr/bin/chromium"

pytestmark = pytest.mark.skipif(shutil.which(CHROMIUM) is None, reason=f"no chromium at {CHROMIUM}")


@pytest.fixture
def pasta(corpus):
    return Document.objects.for_tenant(corpus).get(external_id="recipes/pasta")


@pytest.fixture
def browser(live_server, pasta, admin_member):
    """Chromium, launched after the database work: Django refuses database calls from the test's
    thread while Playwright's event loop lives there."""
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        yield browser
        browser.close()


def watched_page(browser):
    """A new page and the list its CSP violations and page errors are appended to."""
    page = browser.new_page()
    problems: list[str] = []
    page.on("console", lambda m: problems.append(m.text) if "Content Security Policy" in m.text else None)
    page.on("pageerror", lambda e: problems.append(str(e)))
    return page, problems


def test_the_portal_admin_and_api_docs_work_with_no_policy_violation(
    transactional_db, live_server, pasta, admin_member, browser
):
    page, problems = watched_page(browser)
    page.goto(live_server.url + reverse("portal:login"))
    page.fill("input[name=username]", admin_member.username)
    page.fill("input[name=password]", "pass-word-123")
    page.click("button[type=submit]")
    page.wait_for_url(live_server.url + reverse("portal:ask"))
    assert page.eval_on_selector("header", "e => getComputedStyle(e).backgroundColor") == "rgb(255, 255, 255)"

    page.fill("textarea[name=question]", "How long should spaghetti cook?")
    page.click("#ask-form button[type=submit]")
    expect(page.locator("#answer-area .answer a.cite").first).to_be_visible(timeout=30_000)  # the script ran

    page.goto(live_server.url + reverse("portal:document", args=[pasta.pk]))
    expect(page.locator("h1")).to_have_text("Cooking pasta")

    page.goto(live_server.url + reverse("admin:index"))
    expect(page.locator("#site-name")).to_be_visible()

    page.goto(live_server.url + reverse("api-docs"))
    expect(page.locator(".swagger-ui .info .title")).to_contain_text("Knowledge base API", timeout=30_000)
    expect(page.locator(".opblock-summary-path").first).to_be_visible()

    assert problems == []
