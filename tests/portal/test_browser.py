"""The portal in a real browser (Playwright driving Debian's chromium): the answer streams in.

Needs ``/usr/bin/chromium`` (``apt-get install chromium``; scripts/test.sh installs it); Playwright's
own browser downloads are never used. The live server runs in a thread of this process, so the
scripted LLM patched in here is the one the server's answer runs call.
"""

import re
import shutil
import time

import pytest
from django.urls import reverse
from playwright.sync_api import expect, sync_playwright

from knowledge.models import Document
from tests.retrieval.doubles import ScriptedLLM

CHROMIUM = "/usr/bin/chromium"

pytestmark = pytest.mark.skipif(
    shutil.which(CHROMIUM) is None, reason=f"no chromium at {CHROMIUM} (apt-get install chromium)"
)


class SlowScriptedLLM(ScriptedLLM):
    """A scripted LLM whose streamed answer arrives a word every ``delay_s`` seconds."""

    def __init__(self, *, delay_s: float, **kwargs):
        super().__init__(**kwargs)
        self.delay_s = delay_s

    def stream(self, messages, *, max_tokens=512, **options):
        for piece in super().stream(messages, max_tokens=max_tokens, **options):
            time.sleep(self.delay_s)
            yield piece


@pytest.fixture
def pasta(corpus):
    return Document.objects.for_tenant(corpus).get(external_id="recipes/pasta")


@pytest.fixture
def browser(live_server, pasta, member):
    """Chromium, launched once the database is set up: Django refuses database calls from the
    test's thread while Playwright's event loop lives there."""
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        yield browser
        browser.close()


def db_read(read):
    """``read()`` (a database query) run in a thread of its own: Django refuses database calls
    from the test's thread while Playwright's event loop lives there."""
    from concurrent.futures import ThreadPoolExecutor

    from django.db import connection

    def run():
        try:
            return read()
        finally:
            connection.close()

    with ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(run).result()


def sign_in(page, base_url: str, user) -> None:
    page.goto(base_url + reverse("portal:login"))
    page.fill("input[name=username]", user.username)
    page.fill("input[name=password]", "pass-word-123")
    page.click("button[type=submit]")
    page.wait_for_url(base_url + reverse("portal:ask"))


def test_the_answer_streams_in_step_by_step_then_shows_its_citation_links(
    transactional_db, written_style, live_server, pasta, member, monkeypatch, browser
):
    reply = {
        "short_answer": "Nine to eleven minutes",
        "answer": "Cook the spaghetti for nine to eleven minutes until al dente [1].",
    }
    llm = SlowScriptedLLM(answer_reply=reply, delay_s=0.15)
    monkeypatch.setattr("retrieval.pipeline.configured_llm", lambda: llm)
    page = browser.new_page()
    sign_in(page, live_server.url, member)

    page.fill("textarea[name=question]", "How long should spaghetti cook?")
    page.select_option("select[name=pipeline]", "simple")
    page.click("#ask-form button[type=submit]")

    area = page.locator("#answer-area")
    steps = area.locator(".live-steps li")
    expect(steps.first).to_contain_text("scope")  # steps first: the access scope, then retrieval
    expect(steps.nth(1)).to_contain_text("retrieve")
    expect(area.locator(".live-short-answer")).to_have_text("Nine to eleven minutes")  # the short answer first
    expect(area.locator(".live-answer")).to_contain_text("Cook the")  # then the explanation, as it streams
    assert "{" not in area.locator(".live-answer").inner_text()  # its text, never the raw JSON
    assert area.locator("a.cite").count() == 0  # before the final answer
    assert page.url == live_server.url + reverse("portal:ask")  # no page load: the script streams

    cite = area.locator(".answer a.cite").first
    expect(cite).to_have_text("[1]", timeout=15_000)
    # The link records the opening (personalization), then redirects to the cited chunk.
    assert re.fullmatch(r"/answers/\d+/citations/1/", cite.get_attribute("href"))
    expect(area.locator(".live")).to_have_count(0)  # the live view was replaced by the answer
    expect(area.locator(".answer")).to_contain_text("nine to eleven minutes until al dente")
    expect(area.locator("p.short-answer")).to_have_text("Nine to eleven minutes")
    expect(area.locator("ol.citations a").first).to_have_text("Cooking pasta")
    expect(area.locator("details.trace summary")).to_contain_text("How this answer was made: 5 steps")


def test_a_member_asks_gives_feedback_follows_up_and_opens_a_citation(
    transactional_db, live_server, pasta, member, browser
):
    """The whole flow with htmx: feedback on the answer and on a citation swaps its form in place,
    a follow-up continues the conversation, the conversations page unfolds it, a citation opens."""
    from people.models import Conversation, Feedback

    page = browser.new_page()
    sign_in(page, live_server.url, member)
    area = page.locator("#answer-area")

    page.fill("textarea[name=question]", "How long should spaghetti cook?")
    page.click("#ask-form button[type=submit]")
    expect(area.locator(".answer a.cite").first).to_have_text("[1]", timeout=30_000)

    # Feedback on the answer: htmx posts the form and swaps in the server's reply, no page load.
    answer_form = area.locator("form.feedback").last
    answer_form.locator("input[name=comment]").fill("Clear and short")
    answer_form.get_by_role("button", name="Helpful", exact=True).click()
    answer_form = area.locator("form.feedback").last  # the swapped-in form
    expect(answer_form.locator(".feedback-status")).to_have_text("Thanks for your feedback.")
    expect(answer_form.get_by_role("button", name="Helpful", exact=True)).to_have_attribute("aria-pressed", "true")
    expect(answer_form.locator("input[name=comment]")).to_have_value("Clear and short")
    assert page.url == live_server.url + reverse("portal:ask")
    feedback = db_read(lambda: Feedback.objects.values_list("rating", "comment", "citation").get())
    assert feedback == (1, "Clear and short", None)

    # On citation [1], from the keyboard: focus its "not useful" button and press Enter.
    cited = area.locator("ol.citations li").first.locator("form.feedback")
    cited.get_by_role("button", name="[1] was not useful").focus()
    page.keyboard.press("Enter")
    cited = area.locator("ol.citations li").first.locator("form.feedback")
    expect(cited.locator(".feedback-status")).to_have_text("Thanks for your feedback.")
    expect(cited.get_by_role("button", name="[1] was not useful")).to_have_attribute("aria-pressed", "true")
    assert db_read(lambda: Feedback.objects.filter(citation=1).values_list("rating", flat=True).get()) == -1

    # A follow-up continues the conversation: the first question shows above the new answer.
    page.fill("textarea[name=question]", "And what should I keep before draining it?")
    page.click("#ask-form button[type=submit]")
    expect(area.locator(".thread .turn-question")).to_have_text("How long should spaghetti cook?", timeout=30_000)
    # scope, condense, the usual four, and personal: the member's thumbs-up now boosts that document
    expect(area.locator("details.trace summary")).to_contain_text("7 steps")
    turns = db_read(lambda: list(Conversation.objects.get().turns.values_list("order", flat=True)))
    assert turns == [1, 2]

    # A citation opens its document at the cited chunk.
    area.locator(".answer a.cite").first.click()
    page.wait_for_url(re.compile(rf".*/documents/{pasta.pk}/\?version=1#chunk-\d+"))
    expect(page.locator(".chunk:target")).to_have_count(1)

    # The conversations page: the conversation unfolds its two questions in place (htmx).
    page.goto(live_server.url + reverse("portal:conversations"))
    page.locator("ol.conversations summary").first.click()
    turns = page.locator("ol.conversations .turn-question")
    expect(turns).to_have_text(["How long should spaghetti cook?", "And what should I keep before draining it?"])
    assert page.url == live_server.url + reverse("portal:conversations")

    # Continuing it from there: the ask page shows the thread, and the next question joins it.
    page.get_by_role("link", name="Continue", exact=True).first.click()
    expect(area.locator(".thread .turn-question")).to_have_count(2)
    page.fill("textarea[name=question]", "How much salt goes in the water?")
    page.click("#ask-form button[type=submit]")
    expect(area.locator(".answer")).to_be_visible(timeout=30_000)
    expect(area.locator(".thread .turn-question")).to_have_count(2)  # the earlier two, above the answer
    assert db_read(lambda: Conversation.objects.get().turns.count()) == 3


def test_a_member_saves_the_profile_and_compares_two_versions_in_place(
    transactional_db, live_server, versioned, member, browser
):
    from knowledge.models import Document
    from people.models import Profile

    page = browser.new_page()
    sign_in(page, live_server.url, member)

    page.goto(live_server.url + reverse("portal:profile"))
    page.get_by_label("Team").fill("Platform")
    page.get_by_label("Expertise").select_option("expert")
    page.get_by_role("button", name="Save").click()
    expect(page.locator(".profile-status")).to_have_text("Your profile is saved.")
    assert page.url == live_server.url + reverse("portal:profile")  # swapped in, no page load
    profile = db_read(lambda: Profile.objects.values_list("team", "expertise").get())
    assert profile == ("Platform", "expert")

    document = db_read(lambda: Document.objects.get(external_id="ref/databases"))
    page.goto(live_server.url + reverse("portal:document", args=[document.pk]))
    page.get_by_role("link", name="diff with v2").click()
    expect(page.locator("#diff h2")).to_contain_text("Changes from v1 to v2")
    expect(page.locator("#diff ins").first).to_be_visible()
    page.wait_for_url(re.compile(r".*\?version=2&diff=1$"))  # the address can be shared
    expect(page.locator("h1")).to_have_text(document.title)  # the rest of the page stayed
