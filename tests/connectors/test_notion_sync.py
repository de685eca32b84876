"""Notion through the product: a source synced from a local stand-in of Notion's API, then searched
as the tenant's members. Notion does not tell an integration who may read a page, so every page
shared with it is visible to the whole tenant; a page leaves search when it is trashed or
unshared from the integration."""

import pytest

from knowledge.services.sync import source_sync
from tests.connectors.helpers import member, search_titles, visible_titles
from tests.connectors.samples import SAMPLES
from tests.connectors.standins.notion import paragraph
from tests.factories import TenantFactory

pytestmark = pytest.mark.django_db

HANDBOOK, SALARIES, APOLLO = "Team handbook", "Salary bands", "Apollo launch"


@pytest.fixture(autouse=True)
def _loopback(settings):
    settings.KB_FETCH_ALLOWED_NETWORKS = ["127.0.0.1/32"]
    settings.KB_CONNECTOR_BACKOFF_S = 0


@pytest.fixture
def notion():
    """A handbook, a salary page under it, and a Projects database with one row."""
    with SAMPLES["notion"].running() as standin:
        yield standin


@pytest.fixture
def tenant():
    return TenantFactory()


@pytest.fixture
def source(tenant, notion):
    return SAMPLES["notion"].source(tenant, notion)


def test_the_first_sync_brings_every_shared_page_in_for_the_whole_tenant(tenant, source):
    ada = member(tenant, "ada@example.com")
    carol = member(tenant, "carol@example.com")  # not a Notion user at all
    admin = member(tenant, "admin@example.com", role="admin")

    run = source_sync(source=source)

    assert run.status == "done", run.error
    assert run.counts()["new"] == 3
    for user in (ada, carol, admin):
        assert visible_titles(tenant, user) == {HANDBOOK, SALARIES, APOLLO}
    assert SALARIES in search_titles(tenant, carol, "salary bands reviewed April")
    assert APOLLO in search_titles(tenant, ada, "launch window March")


def test_an_incremental_sync_reads_only_what_changed(tenant, notion, source):
    for n in range(120):
        notion.add_page(f"Weekly report {n}", [paragraph(f"Status update number {n} about the weekly report.")])
    assert source_sync(source=source).status == "done"
    carol = member(tenant, "carol@example.com")
    notion.tick(5)
    notion.edit(notion.salaries, [paragraph("Engineering salary bands are reviewed every October.")])
    notion.add_page("Laptop refresh", [paragraph("New laptops arrive next week.")], parent=notion.handbook)
    notion.reset_counts()

    run = source_sync(source=source)

    assert run.status == "done", run.error
    assert (run.counts()["new"], run.counts()["updated"]) == (1, 1)
    assert notion.count("/v1/blocks/") == 2  # the two pages changed
    assert notion.count("/v1/search") == 1 + 2  # the changes, then the listing (124 pages, 100 a request)
    assert notion.count("/v1/pages/") <= 1  # the parent page's title, for the place
    assert "Laptop refresh" in search_titles(tenant, carol, "new laptops")
    assert SALARIES in search_titles(tenant, carol, "salary bands October")


def test_a_page_trashed_in_notion_leaves_search(tenant, notion, source):
    assert source_sync(source=source).status == "done"
    carol = member(tenant, "carol@example.com")
    assert SALARIES in search_titles(tenant, carol, "salary bands")
    notion.tick()
    notion.trash(notion.salaries)

    run = source_sync(source=source)

    assert run.status == "done", run.error
    assert run.counts()["deleted"] == 1
    assert SALARIES not in search_titles(tenant, carol, "salary bands")
    assert SALARIES not in visible_titles(tenant, carol)


def test_a_page_unshared_from_the_integration_leaves_search_at_the_permission_sync(tenant, notion, source):
    carol = member(tenant, "carol@example.com")
    assert source_sync(source=source).status == "done"
    assert SALARIES in search_titles(tenant, carol, "salary bands")
    notion.unshare(notion.salaries)

    run = source_sync(source=source, scope="permissions")

    assert run.status == "done", run.error
    assert SALARIES not in search_titles(tenant, carol, "salary bands")
    assert visible_titles(tenant, carol) == {HANDBOOK, APOLLO}
