"""A user of two tenants switches tenant in a real browser (Playwright driving Debian's chromium)
and then sees that tenant's sources and answers only. Skipped, with the reason, without
``/usr/bin/chromium`` (the same rule as ``test_browser.py``)."""

import shutil

import pytest
from django.urls import reverse
from playwright.sync_api import expect, sync_playwright

from core.models import Membership
from tests.factories import MembershipFactory
from tests.portal.test_browser import CHROMIUM, sign_in

pytestmark = pytest.mark.skipif(
    shutil.which(CHROMIUM) is None, reason=f"no chromium at {CHROMIUM} (apt-get install chromium)"
)


@pytest.fixture
def both(corpus, other_tenant_corpus):
    """A member of ``corpus`` (slug ``tenant-N``, source ``handbook``) and of ``other`` (``secret``)."""
    membership = MembershipFactory(tenant=corpus, role=Membership.Role.MEMBER)
    Membership.objects.create(user=membership.user, tenant=other_tenant_corpus, role=Membership.Role.MEMBER)
    return membership.user


@pytest.fixture
def browser(live_server, both):
    """Chromium, launched once the database is set up (see ``test_browser.browser``)."""
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        yield browser
        browser.close()


def test_a_user_of_two_tenants_switches_tenant_and_sees_only_its_sources_and_answers(
    transactional_db, live_server, both, corpus, browser
):
    page = browser.new_page()
    sign_in(page, live_server.url, both)
    switcher = page.get_by_label("Tenant")
    expect(switcher).to_have_value("other")  # the first by slug until they switch

    page.goto(live_server.url + reverse("portal:sources"))
    expect(page.locator("table.sources tbody th")).to_have_text(["secret"])

    # Switch with the keyboard-reachable form on the page (htmx posts it; the server sends the
    # browser to the same page, loaded anew for the new tenant).
    page.get_by_label("Tenant").select_option(corpus.slug)
    page.get_by_role("button", name="Switch").click()
    page.wait_for_url(live_server.url + reverse("portal:sources"))
    expect(page.get_by_label("Tenant")).to_have_value(corpus.slug)
    expect(page.locator("table.sources tbody th")).to_have_text(["handbook"])

    # The ask page answers from the chosen tenant: its own bicycle document, never the other's.
    page.goto(live_server.url + reverse("portal:ask"))
    page.fill("textarea[name=question]", "How do I patch a bicycle tyre puncture?")
    page.click("#ask-form button[type=submit]")
    area = page.locator("#answer-area")
    expect(area.locator("ol.citations a").first).to_be_visible(timeout=30_000)
    titles = area.locator("ol.citations a").all_inner_texts()
    assert "Fixing a flat bicycle tyre" in titles and "Secret bicycle tyre notes" not in titles
    assert "Our secret" not in page.content()

    # Back to the other tenant (htmx posts the switch, then loads the page anew for the new
    # tenant): its answer cites its own document only.
    page.get_by_label("Tenant").select_option("other")
    page.get_by_role("button", name="Switch").click()
    expect(page.locator("h1")).to_have_text("Ask Other")
    page.fill("textarea[name=question]", "How do I patch a bicycle tyre puncture?")
    page.click("#ask-form button[type=submit]")
    expect(area.locator("ol.citations a").first).to_be_visible(timeout=30_000)
    assert area.locator("ol.citations a").all_inner_texts() == ["Secret bicycle tyre notes"]
