"""Steering a walk in Chromium (Playwright, Debian's chromium): start it with a pause after round
1, watch round 1's facts and next queries appear, remove a fact, add a query, resume, and read the
answer and path that show both. Skipped, with the reason, without ``/usr/bin/chromium``."""

import shutil
import threading

import pytest
from django.urls import reverse
from playwright.sync_api import expect, sync_playwright

from retrieval.models import TraceStep
from retrieval.walks.models import Walk
from tests.portal.test_browser import CHROMIUM, sign_in
from tests.retrieval.doubles import ScriptedLLM
from tests.walks.scripts import EXPENSES_FACT, QUESTION, TRAVEL_FACT, reply

pytestmark = pytest.mark.skipif(
    shutil.which(CHROMIUM) is None, reason=f"no chromium at {CHROMIUM} (apt-get install chromium)"
)

ADDED_QUERY = "Bicycle tyre puncture patch"


def outside_the_event_loop(read):
    """Run a database ``read`` in a thread of its own (Playwright's sync API keeps an event loop
    in the test's thread, where Django refuses database calls); its result."""
    box = []
    worker = threading.Thread(target=lambda: box.append(read()))
    worker.start()
    worker.join()
    return box[0]


@pytest.fixture
def scripted(monkeypatch):
    llm = ScriptedLLM(
        structured_replies=[
            reply((TRAVEL_FACT, 1), missing=[("Expense reports section", "when and how trip costs are paid back")]),
            reply((EXPENSES_FACT, 1), ("Patch a tyre with glue and a rubber patch.", 2), sufficient=True),
        ],
        structured_reply=reply(sufficient=True),
        chat_reply="Submit an expense report within thirty days [1].",
    )
    monkeypatch.setattr("retrieval.pipeline.configured_llm", lambda: llm)
    return llm


@pytest.fixture
def browser(live_server, walk_corpus, member):
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        yield browser
        browser.close()


def test_pause_after_round_one_remove_a_fact_add_a_query_resume_and_the_answer_and_trace_show_it(
    transactional_db, live_server, walk_corpus, member, scripted, browser
):
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    sign_in(page, live_server.url, member)
    page.goto(live_server.url + reverse("portal:walks"))
    page.fill("#id_question", QUESTION)
    page.fill("#id_pause_after", "1")
    page.fill("#id_k", "1")
    page.click("button:text('Start walk')")

    walk = page.locator("#walk")
    expect(walk).to_have_attribute("data-status", "paused", timeout=30_000)
    fact = page.locator(".walk-edit .fact", has=page.locator(f"input[value='{TRAVEL_FACT}']"))
    expect(fact).to_have_count(1)
    expect(page.locator("#walk-queries")).to_have_value(
        "Expense reports section when and how trip costs are paid back\n"
    )
    fact.locator("input[name=remove]").check()
    queries = page.locator("#walk-queries")
    queries.fill(queries.input_value() + ADDED_QUERY + "\n")
    page.click("button:text('Resume')")

    expect(page.locator("#walk")).to_have_attribute("data-status", "done", timeout=30_000)
    expect(page.locator(".walk-answer")).to_contain_text("thirty days")
    expect(page.locator(".facts .fact.removed")).to_contain_text(TRAVEL_FACT)
    expect(page.locator(".path")).to_contain_text(ADDED_QUERY)
    expect(page.locator(".path li", has_text=ADDED_QUERY)).to_contain_text("person")

    walk_row = outside_the_event_loop(lambda: Walk.objects.get(user=member))
    steered = outside_the_event_loop(
        lambda: TraceStep.objects.get(trace_id=walk_row.trace_id, stage="walk.steered1").summary
    )
    assert steered["queries_added"] == [ADDED_QUERY] and len(steered["facts_removed"]) == 1
    answer_prompt = " ".join(m["content"] for m in scripted.calls[-1][1])
    # Written from the chunks behind the facts kept: the travel policy's chunk, whose only fact was
    # removed, is left out; the expense reports' chunk is in.
    assert "Book every flight through the travel desk" not in answer_prompt
    assert "Submit travel expense reports within thirty days" in answer_prompt
