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

    def stream(self, messages, *, max_tokens=512):
        for piece in super().stream(messages, max_tokens=max_tokens):
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
    transactional_db, live_server, pasta, member, monkeypatch, browser
):
    reply = "Cook the spaghetti for nine to eleven minutes until al dente [1]."
    monkeypatch.setattr("retrieval.pipeline.configured_llm", lambda: SlowScriptedLLM(chat_reply=reply, delay_s=0.25))
    page = browser.new_page()
    sign_in(page, live_server.url, member)

    page.fill("textarea[name=question]", "How long should spaghetti cook?")
    page.select_option("select[name=pipeline]", "simple")
    page.click("#ask-form button[type=submit]")

    area = page.locator("#answer-area")
    expect(area.locator(".live-steps li").first).to_contain_text("retrieve")  # steps first
    expect(area.locator(".live-answer")).to_contain_text("Cook the")  # then the text, as it streams
    assert area.locator("a.cite").count() == 0  # before the final answer
    assert page.url == live_server.url + reverse("portal:ask")  # no page load: the script streams

    cite = area.locator(".answer a.cite").first
    expect(cite).to_have_text("[1]", timeout=15_000)
    # The link records the opening (personalization), then redirects to the cited chunk.
    assert re.fullmatch(r"/answers/\d+/citations/1/", cite.get_attribute("href"))
    expect(area.locator(".live")).to_have_count(0)  # the live view was replaced by the answer
    expect(area.locator(".answer")).to_contain_text("nine to eleven minutes until al dente")
    expect(area.locator("ol.citations a").first).to_have_text("Cooking pasta")
    expect(area.locator("details.trace summary")).to_contain_text("How this answer was made: 4 steps")


def test_a_member_asks_gives_feedback_follows_up_and_opens_a_citation(
    transactional_db, live_server, pasta, member, browser
):
    from retrieval.models import Conversation, Feedback

    page = browser.new_page()
    sign_in(page, live_server.url, member)
    area = page.locator("#answer-area")

    page.fill("textarea[name=question]", "How long should spaghetti cook?")
    page.click("#ask-form button[type=submit]")
    expect(area.locator(".answer a.cite").first).to_have_text("[1]", timeout=30_000)

    # Feedback on the answer, posted in the background by the page's script.
    answer_form = area.locator("form.feedback").last
    answer_form.locator("input[name=comment]").fill("Clear and short")
    answer_form.locator("button[value=up]").click()
    expect(answer_form.locator(".feedback-status")).to_have_text("Thanks for your feedback.")
    assert page.url == live_server.url + reverse("portal:ask")
    feedback = db_read(lambda: Feedback.objects.values_list("rating", "comment", "citation").get())
    assert feedback == (1, "Clear and short", None)

    # A follow-up continues the conversation: the first question shows above the new answer.
    page.fill("textarea[name=question]", "And what should I keep before draining it?")
    page.click("#ask-form button[type=submit]")
    expect(area.locator(".thread .turn-question")).to_have_text("How long should spaghetti cook?", timeout=30_000)
    # condense, the usual four, and personal: the member's thumbs-up now boosts that document
    expect(area.locator("details.trace summary")).to_contain_text("6 steps")
    turns = db_read(lambda: list(Conversation.objects.get().turns.values_list("order", flat=True)))
    assert turns == [1, 2]

    # A citation opens its document at the cited chunk.
    area.locator(".answer a.cite").first.click()
    page.wait_for_url(re.compile(rf".*/documents/{pasta.pk}/\?version=1#chunk-\d+"))
    expect(page.locator(".chunk:target")).to_have_count(1)
