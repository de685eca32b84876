"""Uploading from the Sources page in a real browser (Playwright driving Debian's chromium): an
editor picks two Markdown files, sees both jobs done and the documents counted; a job still
waiting is polled by htmx until it is done. Skipped, with the reason, without ``/usr/bin/chromium``
(the same rule as ``test_browser.py``).

Without a broker each job runs in the upload's own request, so the jobs are done when the list
first shows; the polling is seen with a job row written as pending and finished from the test.
"""

import shutil

import pytest
from django.urls import reverse
from playwright.sync_api import expect, sync_playwright

from core.models import Membership
from knowledge.models import IngestionJob, Source
from tests.factories import MembershipFactory
from tests.portal.test_browser import CHROMIUM, db_read, sign_in
from tests.portal.test_browser_phone import PHONE, assert_nothing_overflows

pytestmark = pytest.mark.skipif(
    shutil.which(CHROMIUM) is None, reason=f"no chromium at {CHROMIUM} (apt-get install chromium)"
)

ONBOARDING = b"# Onboarding\n\nNew starters get a laptop on their first day.\n"
PARKING = b"# Parking\n\nVisitors park behind the building, in the spaces marked P2.\n"


@pytest.fixture(autouse=True)
def upload_dir(settings, tmp_path):
    """Uploads are written under a temporary KB_DATA_DIR, never the real one."""
    settings.KB_DATA_DIR = tmp_path / "data"
    return tmp_path / "data" / "uploads"


@pytest.fixture
def editor(tenant):
    return MembershipFactory(tenant=tenant, role=Membership.Role.EDITOR, user__username="edith").user


@pytest.fixture
def browser(live_server, corpus, editor):
    """Chromium, launched once the database is set up (see ``test_browser.browser``). ``corpus``
    was ingested first, so the embedding model is loaded before an upload needs it (the live
    server is a thread of this process): a cold load on a busy machine outlasts a click's wait."""
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        yield browser
        browser.close()


def source_row(page, name: str):
    return page.locator("table.sources tbody tr").filter(has=page.locator("th", has_text=name))


def test_an_editor_uploads_two_markdown_files_sees_both_jobs_done_and_the_documents_counted(
    transactional_db, live_server, corpus, editor, browser, tmp_path
):
    page = browser.new_page()
    sign_in(page, live_server.url, editor)
    page.goto(live_server.url + reverse("portal:sources"))

    page.set_input_files(
        "input[name=files]",
        [
            {"name": "onboarding.md", "mimeType": "text/markdown", "buffer": ONBOARDING},
            {"name": "parking.md", "mimeType": "text/markdown", "buffer": PARKING},
        ],
    )
    page.get_by_label("New source").fill("handouts")
    page.get_by_role("button", name="Upload").click()

    jobs = page.locator("#upload-jobs tbody tr")
    expect(jobs.locator("th")).to_have_text(["onboarding.md", "parking.md"], timeout=60_000)
    expect(jobs.locator("td.status")).to_have_text(["Done", "Done"])
    expect(jobs.locator("td.result")).to_contain_text(["1 document (1 new)", "1 document (1 new)"])
    expect(source_row(page, "handouts").locator("td[data-label=Kind]")).to_have_text("Upload")
    expect(source_row(page, "handouts").locator("td[data-label=Documents]")).to_have_text("2")
    expect(source_row(page, "handbook").locator("td[data-label=Documents]")).to_have_text("3")  # as it was

    page.goto(live_server.url + reverse("portal:sources"))  # the page anew: the list of sources only
    expect(page.locator("#upload-jobs")).to_have_count(0)
    expect(source_row(page, "handouts").locator("td[data-label=Documents]")).to_have_text("2")
    expect(page.get_by_label("Upload into")).to_have_value("handouts")  # next time, into the same source

    phone = browser.new_page(viewport=PHONE)
    sign_in(phone, live_server.url, editor)
    ids = db_read(lambda: list(IngestionJob.objects.filter(source__name="handouts").values_list("pk", flat=True)))
    phone.goto(f"{page.url}?jobs={ids[0]},{ids[1]}")  # the upload form, the jobs and the sources
    expect(phone.locator("#upload-jobs tbody tr")).to_have_count(2)
    assert_nothing_overflows(phone, "sources-upload", tmp_path)


def test_a_waiting_job_is_polled_until_it_is_done(transactional_db, live_server, tenant, editor, browser):
    def write_pending_job():
        source = Source.objects.create(tenant=tenant, name="uploads", kind=Source.Kind.UPLOAD)
        return IngestionJob.objects.create(tenant=tenant, source=source, file_name="late.md", stored_path="/nowhere")

    job = db_read(write_pending_job)
    page = browser.new_page()
    sign_in(page, live_server.url, editor)
    page.goto(f"{live_server.url}{reverse('portal:sources')}?jobs={job.pk}")
    status = page.locator("#upload-jobs td.status")
    expect(status).to_have_text("Pending")
    expect(page.locator("#upload-jobs")).to_have_attribute("hx-trigger", "every 2s")
    page.evaluate("window.loadedOnce = true")  # gone if the page were loaded again

    db_read(
        lambda: IngestionJob.objects.filter(pk=job.pk).update(
            status=IngestionJob.Status.DONE, result={"created": 1, "chunks": 1}
        )
    )
    expect(status).to_have_text("Done", timeout=10_000)
    assert page.evaluate("window.loadedOnce === true")  # swapped in by htmx, not a page load
    expect(page.locator("#upload-jobs td.result")).to_have_text("1 document (1 new), 1 chunk stored")
    expect(page.locator("#upload-jobs")).not_to_have_attribute("hx-trigger", "every 2s")  # polling ended
    expect(page.get_by_role("link", name="Refresh")).to_have_count(0)
    page.get_by_role("link", name="Reload the page").click()  # for the sources' new counts
    expect(page.locator("#upload-jobs td.status")).to_have_text("Done")
