"""GitHub through the product: a source synced from a local stand-in of GitHub's REST API, then
searched as the tenant's members, who see a private repository's issues only while they are its
collaborators."""

import pytest

from knowledge.services.sync import source_sync
from tests.connectors.helpers import member, search_titles, visible_titles
from tests.connectors.samples import SAMPLES
from tests.factories import TenantFactory

pytestmark = pytest.mark.django_db

ONBOARDING = "Onboarding checklist (acme/handbook#1)"
TYPO = "Fix typo in onboarding (acme/handbook#2)"
PLANS = "Acquisition of Globex (acme/secret#1)"


@pytest.fixture(autouse=True)
def _loopback(settings):
    settings.KB_FETCH_ALLOWED_NETWORKS = ["127.0.0.1/32"]
    settings.KB_CONNECTOR_BACKOFF_S = 0


@pytest.fixture
def github():
    """acme/handbook (public) and acme/secret (private: Alice, and Bob, whose address only the
    source's ``emails`` option knows)."""
    with SAMPLES["github"].running() as standin:
        yield standin


@pytest.fixture
def tenant():
    return TenantFactory()


@pytest.fixture
def source(tenant, github):
    return SAMPLES["github"].source(tenant, github)


def test_the_first_sync_brings_every_issue_in_and_only_collaborators_find_a_private_one(tenant, source):
    alice = member(tenant, "alice@example.com")
    bob = member(tenant, "bob@example.com")
    carol = member(tenant, "carol@example.com")
    admin = member(tenant, "admin@example.com", role="admin")

    run = source_sync(source=source)

    assert run.status == "done", run.error
    assert run.counts()["new"] == 3
    assert visible_titles(tenant, alice) == {ONBOARDING, TYPO, PLANS}
    assert visible_titles(tenant, carol) == {ONBOARDING, TYPO}
    assert PLANS in search_titles(tenant, bob, "acquisition Globex board")  # mapped by the emails option
    assert PLANS not in search_titles(tenant, carol, "acquisition Globex board")
    assert PLANS in search_titles(tenant, admin, "acquisition Globex board")
    assert ONBOARDING in search_titles(tenant, carol, "VPN setup checklist")  # a comment is searchable


def test_an_incremental_sync_reads_only_what_changed(tenant, github, source):
    for n in range(120):
        github.add_issue("acme/handbook", f"Weekly report {n}", f"Status update number {n}.")
    assert source_sync(source=source).status == "done"
    carol = member(tenant, "carol@example.com")
    github.edit_issue("acme/handbook", github.onboarding, title="Onboarding checklist for engineers")
    github.add_issue("acme/handbook", "New laptops", "New laptops arrive next week.")
    github.reset_counts()

    run = source_sync(source=source)

    assert run.status == "done", run.error
    assert (run.counts()["new"], run.counts()["updated"]) == (1, 1)
    assert github.count("/repos/acme/handbook/issues/") == 1  # the edited issue's comments, nothing else
    assert github.count("/repos/acme/handbook/issues") == 4  # + the changes page + two listing pages
    assert "New laptops (acme/handbook#123)" in search_titles(tenant, carol, "new laptops arrive")
    assert "Onboarding checklist for engineers (acme/handbook#1)" in visible_titles(tenant, carol)


def test_an_issue_deleted_on_github_leaves_search(tenant, github, source):
    assert source_sync(source=source).status == "done"
    carol = member(tenant, "carol@example.com")
    assert ONBOARDING in search_titles(tenant, carol, "VPN setup checklist")
    github.delete_issue("acme/handbook", github.onboarding)

    run = source_sync(source=source)

    assert run.status == "done", run.error
    assert run.counts()["deleted"] == 1
    assert ONBOARDING not in search_titles(tenant, carol, "VPN setup checklist")
    assert ONBOARDING not in visible_titles(tenant, carol)


def test_a_collaborator_removed_from_a_private_repository_no_longer_finds_its_issues(tenant, github, source):
    alice = member(tenant, "alice@example.com")
    bob = member(tenant, "bob@example.com")
    assert source_sync(source=source).status == "done"
    assert PLANS in search_titles(tenant, bob, "acquisition Globex board")
    github.remove_collaborator("acme/secret", "bob")

    run = source_sync(source=source, scope="permissions")

    assert run.status == "done", run.error
    assert PLANS not in search_titles(tenant, bob, "acquisition Globex board")
    assert PLANS not in visible_titles(tenant, bob)
    assert PLANS in visible_titles(tenant, alice)


def test_issues_of_a_repository_whose_collaborators_cannot_be_read_are_for_admins_only(tenant, github, source):
    alice = member(tenant, "alice@example.com")
    admin = member(tenant, "admin@example.com", role="admin")
    github.repos["acme/secret"].collaborators_readable = False

    run = source_sync(source=source)

    assert run.status == "done", run.error
    assert PLANS not in visible_titles(tenant, alice)
    assert PLANS in visible_titles(tenant, admin)
    assert ONBOARDING in visible_titles(tenant, alice)
