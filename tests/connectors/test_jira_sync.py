"""Jira through the product: a source synced from a local stand-in of Jira's REST API, then
searched as the tenant's members, who find an issue of a restricted project only while Jira lets
them browse it."""

import pytest

from knowledge.services.sync import source_sync
from tests.connectors.helpers import member, search_titles, visible_titles
from tests.connectors.samples import SAMPLES
from tests.factories import TenantFactory

pytestmark = pytest.mark.django_db

LOGIN = "ENG-1: Login page times out on slow networks"
UPGRADE = "ENG-2: Upgrade the billing database"
KEYS = "SEC-1: Rotate the signing keys"


@pytest.fixture(autouse=True)
def _loopback(settings):
    settings.KB_FETCH_ALLOWED_NETWORKS = ["127.0.0.1/32"]
    settings.KB_CONNECTOR_BACKOFF_S = 0


@pytest.fixture
def jira():
    """ENG (every Jira user browses it) and SEC (the Developers role, Alice, and the
    security-team group, Carol)."""
    with SAMPLES["jira"].running() as standin:
        yield standin


@pytest.fixture
def tenant():
    return TenantFactory()


@pytest.fixture
def source(tenant, jira):
    return SAMPLES["jira"].source(tenant, jira)


def test_the_first_sync_brings_every_issue_in_and_only_those_who_may_browse_find_a_restricted_one(tenant, source):
    alice = member(tenant, "alice@example.com")
    bob = member(tenant, "bob@example.com")
    carol = member(tenant, "carol@example.com")
    admin = member(tenant, "admin@example.com", role="admin")

    run = source_sync(source=source)

    assert run.status == "done", run.error
    assert run.counts()["new"] == 3
    assert visible_titles(tenant, alice) == {LOGIN, UPGRADE, KEYS}  # in the Developers role
    assert visible_titles(tenant, carol) == {LOGIN, UPGRADE, KEYS}  # in the security-team group
    assert visible_titles(tenant, bob) == {LOGIN, UPGRADE}
    assert KEYS in search_titles(tenant, alice, "zeppelin vault signing keys")
    assert KEYS not in search_titles(tenant, bob, "zeppelin vault signing keys")
    assert KEYS in search_titles(tenant, admin, "zeppelin vault signing keys")
    assert LOGIN in search_titles(tenant, bob, "proxy closes idle connections")  # a comment is searchable


def test_an_incremental_sync_reads_only_what_changed(tenant, jira, source):
    for n in range(120):
        jira.tick(0.25)
        jira.issue("ENG", f"Weekly report {n}", "Status of the weekly report.")
    assert source_sync(source=source).status == "done"
    bob = member(tenant, "bob@example.com")
    jira.tick()
    jira.edit("ENG-2", summary="Upgrade the billing database to PostgreSQL 17")
    jira.tick()
    jira.issue("ENG", "New laptops for the team", "The laptops arrive next week.")
    jira.reset_counts()

    run = source_sync(source=source, scope="content")

    assert run.status == "done", run.error
    assert (run.counts()["new"], run.counts()["updated"]) == (1, 1)
    assert jira.count("/rest/api/2/search") == 1  # one page of what changed
    assert jira.count("/rest/api/2/issue/") == 0  # nothing read issue by issue
    assert "ENG-123: New laptops for the team" in search_titles(tenant, bob, "new laptops arrive")
    assert "ENG-2: Upgrade the billing database to PostgreSQL 17" in visible_titles(tenant, bob)


def test_an_issue_deleted_in_jira_leaves_search(tenant, jira, source):
    assert source_sync(source=source).status == "done"
    bob = member(tenant, "bob@example.com")
    assert UPGRADE in search_titles(tenant, bob, "billing database")
    jira.delete("ENG-2")

    run = source_sync(source=source, scope="permissions")

    assert run.status == "done", run.error
    assert run.counts()["deleted"] == 1
    assert UPGRADE not in search_titles(tenant, bob, "billing database")
    assert UPGRADE not in visible_titles(tenant, bob)


def test_a_member_removed_from_the_project_role_no_longer_finds_its_issues(tenant, jira, source):
    alice = member(tenant, "alice@example.com")
    carol = member(tenant, "carol@example.com")
    assert source_sync(source=source).status == "done"
    assert KEYS in search_titles(tenant, alice, "zeppelin vault signing keys")
    jira.role("SEC", "10002", "Developers", users=[])

    run = source_sync(source=source, scope="permissions")

    assert run.status == "done", run.error
    assert KEYS not in search_titles(tenant, alice, "zeppelin vault signing keys")
    assert KEYS not in visible_titles(tenant, alice)
    assert KEYS in visible_titles(tenant, carol)  # still in the security-team group
