"""The GitHub connector against a local stand-in of GitHub's REST API, through PyGithub."""

import time

import pytest

from core.errors import InvalidInput
from knowledge.connectors.base import PUBLIC, CredentialRejected, Permission, SourceUnreachable
from knowledge.connectors.services import service_connector
from tests.connectors.standins.github import GitHubStandIn
from tests.factories import SourceFactory, TenantFactory

pytestmark = pytest.mark.django_db

REPOSITORIES = ["acme/handbook", "acme/secret"]
OPTIONS = {"repositories": REPOSITORIES, "emails": {"bob": "Bob@Example.com"}}


@pytest.fixture(autouse=True)
def _loopback(settings):
    settings.KB_FETCH_ALLOWED_NETWORKS = ["127.0.0.1/32"]
    settings.KB_CONNECTOR_BACKOFF_S = 0


@pytest.fixture
def github():
    """acme/handbook (public: an issue with a comment, a pull request with a review comment) and
    acme/secret (private: Alice, Bob and Dave; Bob hides his address, Dave too and is not mapped)."""
    with GitHubStandIn() as standin:
        standin.add_user("alice", "alice@example.com")
        standin.add_user("carol", "carol@example.com")
        standin.add_repo("acme/handbook", visibility="public", collaborators=["alice", "carol"])
        standin.add_repo("acme/secret", visibility="private", collaborators=["alice", "bob", "dave"])
        standin.onboarding = standin.add_issue(
            "acme/handbook", "Onboarding checklist", "New hires get a laptop on day one.", labels=["docs"]
        )
        standin.comment("acme/handbook", standin.onboarding, "Add the VPN setup to the checklist.", author="carol")
        standin.typo = standin.add_issue("acme/handbook", "Fix typo in onboarding", "Small wording fix.", pull=True)
        standin.comment("acme/handbook", standin.typo, "Should be 'laptop', not 'lapto'.", path="onboarding.md")
        standin.plans = standin.add_issue("acme/secret", "Acquisition of Globex", "The board agreed to buy Globex.")
        standin.comment("acme/secret", standin.plans, "Legal review starts Monday.", author="bob")
        yield standin


def connector(github, options=OPTIONS):
    source = SourceFactory(
        tenant=TenantFactory(), kind="github", location=github.url, secret=github.token, options=options
    )
    return service_connector(source)


def by_key(items):
    return {item.key: item for item in items}


def test_the_first_changes_return_every_issue_and_pull_request_with_its_comments(github):
    items = by_key(connector(github).changes({}))

    assert set(items) == {"acme/handbook#1", "acme/handbook#2", "acme/secret#1"}
    issue = items["acme/handbook#1"].documents[0]
    assert issue.title == "Onboarding checklist (acme/handbook#1)"
    assert issue.external_id == "github/acme/handbook#1"
    assert issue.uri == "https://github.com/acme/handbook/issues/1"
    assert "New hires get a laptop on day one." in issue.text
    assert "## Comments" in issue.text and "Add the VPN setup to the checklist." in issue.text
    assert "Labels: docs." in issue.text
    assert issue.metadata["place"] == "acme/handbook"
    assert issue.metadata["author"] == "alice"
    assert issue.metadata["source_kind"] == "github"
    assert issue.published_at is not None and issue.published_at.tzinfo is not None
    pull = items["acme/handbook#2"].documents[0]
    assert pull.uri == "https://github.com/acme/handbook/pull/2"
    assert "Pull request #2" in pull.text
    assert "## Review comments" in pull.text and "on `onboarding.md`" in pull.text
    assert items["acme/handbook#1"].permission == PUBLIC
    assert items["acme/secret#1"].permission == Permission.of(groups=["repo:acme/secret"])
    assert "Legal review starts Monday." in items["acme/secret#1"].documents[0].text
    assert all(item.checkpoint for item in items.values())


def test_an_incremental_change_feed_returns_only_the_edited_and_the_new_issue(github):
    for n in range(150):
        github.add_issue("acme/handbook", f"Weekly report {n}", "Numbers went up.")
    items = list(connector(github).changes({}))
    assert len(items) == 153
    checkpoint = items[-1].checkpoint
    github.edit_issue("acme/handbook", github.onboarding, body="New hires get a laptop and a badge on day one.")
    github.add_issue("acme/secret", "Globex integration plan", "Teams merge in June.")
    github.reset_counts()

    changed = by_key(connector(github).changes(checkpoint))

    assert set(changed) == {"acme/handbook#1", "acme/secret#2"}
    assert "a badge" in changed["acme/handbook#1"].documents[0].text
    # Per repository: itself, its collaborators (private only) and one page of changed issues;
    # then one request per changed issue with comments. Not one per stored document.
    assert github.count("/repos/acme/handbook/issues") == 2  # the list page, and #1's comments
    assert github.count("/repos/acme/secret/issues") == 1
    assert github.count() <= 6


def test_a_checkpoint_does_not_return_what_it_already_covers(github):
    checkpoint = list(connector(github).changes({}))[-1].checkpoint

    assert list(connector(github).changes(checkpoint)) == []


def test_the_listing_pages_through_every_issue_a_hundred_at_a_time_and_drops_a_deleted_one(github):
    for n in range(150):
        github.add_issue("acme/handbook", f"Weekly report {n}", "Numbers went up.")
    listed = dict(connector(github).listing())
    assert len(listed) == 153
    assert github.count("/repos/acme/handbook/issues") == 2  # 152 issues: two pages of 100
    github.delete_issue("acme/handbook", github.onboarding)

    listed_after = dict(connector(github).listing())

    assert "acme/handbook#1" not in listed_after
    assert listed_after["acme/handbook#2"] == listed["acme/handbook#2"]  # the fingerprint: updated_at
    [gone] = connector(github).fetch(["acme/handbook#1"])
    assert gone.deleted


def test_fetch_reads_an_issue_again_with_its_permission(github):
    [item] = connector(github).fetch(["acme/secret#1"])

    assert not item.deleted and item.documents[0].title == "Acquisition of Globex (acme/secret#1)"
    assert item.permission == Permission.of(groups=["repo:acme/secret"])
    assert item.fingerprint == dict(connector(github).listing())["acme/secret#1"]


def test_groups_give_collaborators_by_public_address_or_by_the_emails_option(github):
    [group] = connector(github).groups()  # the public repository needs none

    assert group.external_id == "repo:acme/secret"
    assert group.name == "github:acme/secret"
    assert group.emails == {"alice@example.com", "bob@example.com"}  # dave has no address: no access


def test_a_collaborator_removed_on_github_leaves_the_repository_group(github):
    github.remove_collaborator("acme/secret", "bob")

    [group] = connector(github).groups()

    assert group.emails == {"alice@example.com"}


def test_permissions_fail_closed_when_the_token_cannot_list_collaborators(github):
    keys = ["acme/handbook#1", "acme/secret#1"]
    assert dict(connector(github).permissions(keys))["acme/secret#1"] == Permission.of(groups=["repo:acme/secret"])
    github.repos["acme/secret"].collaborators_readable = False

    permissions = dict(connector(github).permissions(keys))

    assert permissions == {"acme/handbook#1": PUBLIC, "acme/secret#1": None}
    assert list(connector(github).groups()) == []


def test_a_repository_made_public_makes_its_issues_public(github):
    github.repos["acme/secret"].visibility = "public"

    assert dict(connector(github).permissions(["acme/secret#1"])) == {"acme/secret#1": PUBLIC}


def test_an_org_option_reads_every_repository_of_the_organisation(github):
    github.add_repo("other/tools", visibility="public")
    github.add_issue("other/tools", "Not ours", "Elsewhere.")

    keys = {key for key, _fingerprint in connector(github, {"org": "acme"}).listing()}

    assert keys == {"acme/handbook#1", "acme/handbook#2", "acme/secret#1"}


def test_a_429_with_retry_after_is_waited_out(github):
    github.fail_next(429, retry_after=1)
    started = time.monotonic()

    items = list(connector(github).changes({}))

    assert len(items) == 3
    assert time.monotonic() - started >= 0.9
    assert github.requests[0] == github.requests[1]  # the rate-limited request, tried again


@pytest.mark.parametrize("kind", ["secondary", "primary"])
def test_a_403_rate_limit_is_waited_out(github, kind):
    github.rate_limit_next(kind, wait=1)

    items = list(connector(github).listing())

    assert len(items) == 3
    assert github.requests[0] == github.requests[1]


def test_a_retry_after_longer_than_the_connector_waits_fails_the_call(github):
    github.fail_next(429, retry_after=3600)
    started = time.monotonic()

    with pytest.raises(SourceUnreachable, match="wait 3600 s"):
        list(connector(github).listing())
    assert time.monotonic() - started < 10


def test_a_spent_hourly_rate_limit_fails_the_call_instead_of_waiting_for_its_reset(github):
    github.rate_limit_next("primary", wait=3600)
    started = time.monotonic()

    with pytest.raises(SourceUnreachable, match="rate limit"):
        list(connector(github).listing())
    assert time.monotonic() - started < 10


def test_a_server_error_is_retried(github):
    github.fail_next(502, retry_after=None, count=2)

    assert len(list(connector(github).listing())) == 3
    assert github.requests[0] == github.requests[2]


def test_a_server_that_keeps_failing_makes_the_source_unreachable(github, settings):
    settings.KB_CONNECTOR_RETRIES = 1
    github.fail_next(503, retry_after=None, count=5)

    with pytest.raises(SourceUnreachable, match="HTTP 503"):
        list(connector(github).listing())


def test_a_revoked_token_is_rejected_with_a_clear_message(github):
    github.revoke()

    with pytest.raises(CredentialRejected, match="HTTP 401.*revoked or has expired"):
        list(connector(github).changes({}))


def test_a_missing_repository_makes_the_source_unreachable_rather_than_empty(github):
    with pytest.raises(SourceUnreachable, match="acme/gone"):
        list(connector(github, {"repositories": ["acme/gone"]}).listing())


def test_check_says_who_the_token_is_and_what_it_reads(github):
    line = connector(github).check()

    assert line.startswith("Signed in as kb-reader: 2 repositories (1 private or internal")
    assert "collaborators readable in 1" in line and "acme/handbook, acme/secret" in line


@pytest.mark.parametrize("options", [{}, {"repositories": ["not a name"]}, {"repositories": "acme"}])
def test_options_must_name_repositories_or_an_organisation(github, options):
    with pytest.raises(InvalidInput):
        connector(github, options)


def test_every_request_goes_through_the_address_guard(github, settings):
    settings.KB_FETCH_ALLOWED_NETWORKS = []

    with pytest.raises(SourceUnreachable, match="not allowed"):
        list(connector(github).listing())
    assert github.count() == 0
