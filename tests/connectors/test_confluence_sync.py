"""Confluence through the product: a source synced from a local stand-in of Confluence Cloud, then
searched as the tenant's members, who see a space's pages only while they may read the space and
a restricted page only while its restriction names them."""

import pytest

from knowledge.services.sync import source_sync
from tests.connectors.helpers import member, search_titles, visible_titles
from tests.connectors.samples import SAMPLES
from tests.factories import TenantFactory

pytestmark = pytest.mark.django_db

DEPLOY, ROADMAP, HOLIDAYS, SALARIES, RUNBOOK = (
    "Deploy guide",
    "Secret roadmap",
    "Holiday calendar",
    "Salary bands",
    "runbook.md",
)


@pytest.fixture(autouse=True)
def _loopback(settings):
    settings.KB_FETCH_ALLOWED_NETWORKS = ["127.0.0.1/32"]
    settings.KB_CONNECTOR_BACKOFF_S = 0


@pytest.fixture
def confluence():
    """ENG (the engineering group: Alice, Bob) with a deploy guide (a comment, a runbook) and a
    roadmap restricted to Alice; COMPANY (confluence-users: everyone) with a holiday calendar; HR
    (Carol alone) with the salary bands."""
    with SAMPLES["confluence"].running() as standin:
        yield standin


@pytest.fixture
def tenant():
    return TenantFactory()


@pytest.fixture
def source(tenant, confluence):
    return SAMPLES["confluence"].source(tenant, confluence)


def test_the_first_sync_brings_every_page_in_and_maps_who_may_read_it(tenant, source):
    alice = member(tenant, "alice@example.com")
    bob = member(tenant, "bob@example.com")
    carol = member(tenant, "carol@example.com")
    admin = member(tenant, "admin@example.com", role="admin")

    run = source_sync(source=source)

    assert run.status == "done", run.error
    assert run.counts()["new"] == 5
    assert visible_titles(tenant, alice) == {DEPLOY, RUNBOOK, ROADMAP, HOLIDAYS}
    assert visible_titles(tenant, bob) == {DEPLOY, RUNBOOK, HOLIDAYS}
    assert visible_titles(tenant, carol) == {HOLIDAYS, SALARIES}
    assert ROADMAP in search_titles(tenant, alice, "Mars market rockets")
    assert ROADMAP not in search_titles(tenant, bob, "Mars market rockets")
    assert ROADMAP in search_titles(tenant, admin, "Mars market rockets")
    assert DEPLOY in search_titles(tenant, bob, "canary dashboards")  # a comment is searchable
    assert RUNBOOK in search_titles(tenant, bob, "storage team disk alerts")  # and an attachment


def test_an_incremental_sync_reads_only_what_changed(tenant, confluence, source):
    for n in range(120):
        confluence.page("COMPANY", f"Weekly report {n}", f"<p>Status update number {n}.</p>")
    assert source_sync(source=source).status == "done"
    carol = member(tenant, "carol@example.com")
    confluence.edit(confluence.holidays, "<p>The office is closed from 24 to 26 December.</p>")
    laptops = confluence.page("COMPANY", "New laptops", "<p>New laptops arrive next week.</p>")
    confluence.reset_counts()

    run = source_sync(source=source)

    assert run.status == "done", run.error
    assert (run.counts()["new"], run.counts()["updated"]) == (1, 1)
    bodies = [cql for cql, expand in confluence.searches if "body.storage" in expand]
    assert bodies == [f"id in ({confluence.holidays}, {laptops})"]  # one search for what changed
    assert sum(path.endswith("/child/comment") for _method, path in confluence.requests) == 2
    assert confluence.count("/wiki/download/") == 0
    assert "New laptops" in search_titles(tenant, carol, "new laptops")
    assert HOLIDAYS in search_titles(tenant, carol, "closed from 24 to 26 December")


def test_a_page_deleted_in_confluence_leaves_search(tenant, confluence, source):
    assert source_sync(source=source).status == "done"
    carol = member(tenant, "carol@example.com")
    assert HOLIDAYS in search_titles(tenant, carol, "winter holidays office")
    confluence.delete(confluence.holidays)

    run = source_sync(source=source)

    assert run.status == "done", run.error
    assert run.counts()["deleted"] == 1
    assert HOLIDAYS not in search_titles(tenant, carol, "winter holidays office")
    assert HOLIDAYS not in visible_titles(tenant, carol)


def test_a_page_restricted_and_a_member_removed_from_a_group_are_followed_by_a_permission_sync(
    tenant, confluence, source
):
    bob = member(tenant, "bob@example.com")
    carol = member(tenant, "carol@example.com")
    assert source_sync(source=source).status == "done"
    assert HOLIDAYS in search_titles(tenant, carol, "winter holidays office")
    assert DEPLOY in search_titles(tenant, bob, "blue-green switch")
    confluence.restrict(confluence.holidays, users=["a1", "b1"])
    confluence.groups["g-eng"]["members"].remove("b1")

    run = source_sync(source=source, scope="permissions")

    assert run.status == "done", run.error
    assert HOLIDAYS not in search_titles(tenant, carol, "winter holidays office")
    assert HOLIDAYS in visible_titles(tenant, bob)
    assert DEPLOY not in search_titles(tenant, bob, "blue-green switch")
    assert visible_titles(tenant, bob) == {HOLIDAYS}
