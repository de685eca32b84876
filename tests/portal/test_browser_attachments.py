"""Conversation files in a real browser (Playwright driving Debian's chromium): htmx posts the file."""

import pytest
from django.urls import reverse
from playwright.sync_api import expect, sync_playwright

from people.models import ConversationFile
from tests.portal.test_browser import CHROMIUM, db_read, pytestmark, sign_in  # noqa: F401  (the skip mark)

NOTES = b"# Zephyr budget notes\n\nThe zephyrzq project budget for next year is forty-two thousand euros.\n"


@pytest.fixture
def browser(live_server, corpus, member):
    """Chromium, launched once the database is set up (as ``tests.portal.test_browser``'s)."""
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        yield browser
        browser.close()


def test_a_file_attached_in_the_browser_opens_its_conversation_and_another_joins_it_in_place(
    transactional_db, live_server, corpus, member, browser
):
    page = browser.new_page()
    errors = []  # script errors and CSP refusals (not the missing favicon)
    page.on(
        "console",
        lambda message: errors.append(message.text) if message.type == "error" and "404" not in message.text else None,
    )
    sign_in(page, live_server.url, member)

    page.set_input_files(
        "#attach-file-new", files=[{"name": "zephyr.md", "mimeType": "text/markdown", "buffer": NOTES}]
    )
    page.click("#conversation-file-start button[type=submit]")
    page.wait_for_url(f"{live_server.url}{reverse('portal:ask')}?conversation=*")
    expect(page.locator("#conversation-files")).to_contain_text("zephyr.md")

    field = page.locator("#conversation-files input[type=file]")
    field.set_input_files(
        files=[{"name": "second.txt", "mimeType": "text/plain", "buffer": b"A second zephyrzq note."}]
    )
    page.click("#conversation-files form.attach button[type=submit]")
    expect(page.locator("#conversation-files")).to_contain_text("Attached second.txt.")
    assert db_read(lambda: sorted(ConversationFile.objects.values_list("name", flat=True))) == [
        "second.txt",
        "zephyr.md",
    ]
    assert not errors  # no CSP refusal, no script error
