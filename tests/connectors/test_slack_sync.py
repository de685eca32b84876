"""Slack through the product: a source synced from a local stand-in of Slack's Web API, then
searched as the tenant's members, who see a private channel's threads only while they are in it."""

import pytest

from knowledge.services.sync import source_sync
from tests.connectors.helpers import member, search_titles, visible_titles
from tests.connectors.samples import SAMPLES
from tests.factories import TenantFactory

pytestmark = pytest.mark.django_db

PLANS = "#secret-plans: We plan to acquire Globex in spring, the board agreed."
FREEZE = "#general: Deploy freeze starts Friday for the payment service."
LUNCH = "#general: Team lunch on Thursday at the canteen."


@pytest.fixture(autouse=True)
def _loopback(settings):
    settings.KB_FETCH_ALLOWED_NETWORKS = ["127.0.0.1/32"]
    settings.KB_CONNECTOR_BACKOFF_S = 0


@pytest.fixture
def slack():
    """#general (public, with a thread) and #secret-plans (private: Alice and Bob)."""
    with SAMPLES["slack"].running() as standin:
        yield standin


@pytest.fixture
def tenant():
    return TenantFactory()


@pytest.fixture
def source(tenant, slack):
    return SAMPLES["slack"].source(tenant, slack)


def test_the_first_sync_brings_every_thread_in_and_only_channel_members_find_a_private_one(tenant, source):
    alice = member(tenant, "alice@example.com")
    carol = member(tenant, "carol@example.com")
    admin = member(tenant, "admin@example.com", role="admin")

    run = source_sync(source=source)

    assert run.status == "done", run.error
    assert run.counts()["new"] == 3
    assert visible_titles(tenant, alice) == {PLANS, FREEZE, LUNCH}
    assert visible_titles(tenant, carol) == {FREEZE, LUNCH}
    assert PLANS in search_titles(tenant, alice, "acquire Globex")
    assert PLANS not in search_titles(tenant, carol, "acquire Globex")
    assert PLANS in search_titles(tenant, admin, "acquire Globex")
    assert FREEZE in search_titles(tenant, carol, "hotfixes review during the freeze")  # a reply is searchable


def test_an_incremental_sync_reads_only_what_changed(tenant, slack, source):
    for n in range(120):
        slack.post("C1", "U3", f"Status update number {n} about the weekly report.")
    assert source_sync(source=source).status == "done"
    carol = member(tenant, "carol@example.com")
    slack.edit("C1", slack.lunch, "Team lunch moves to Friday at the canteen.")
    slack.post("C1", "U1", "New laptops arrive next week.")
    slack.reset_counts()

    run = source_sync(source=source)

    assert run.status == "done", run.error
    assert (run.counts()["new"], run.counts()["updated"]) == (1, 1)
    assert run.counts()["unchanged"] == 0  # the 122 other threads were not read again
    assert slack.count("/conversations.replies") == 0  # neither thread has replies to read
    assert slack.count("/conversations.history") == 4  # per channel: the recent threads, then the listing
    assert len(slack.requests) <= 10  # for 124 threads
    assert "#general: New laptops arrive next week." in search_titles(tenant, carol, "new laptops")
    assert "#general: Team lunch moves to Friday at the canteen." in visible_titles(tenant, carol)


def test_a_content_sync_finds_new_threads_replies_and_edits_with_one_history_request_per_channel(tenant, slack, source):
    bob = member(tenant, "bob@example.com")
    assert source_sync(source=source).status == "done"
    slack.post("C2", "U2", "Globex due diligence starts Monday.")
    slack.post("C1", "U3", "Staging is frozen too.", thread=slack.freeze)
    slack.edit("C1", slack.lunch, "Team lunch moves to Friday at the canteen.")
    slack.reset_counts()

    run = source_sync(source=source, scope="content")

    assert run.status == "done", run.error
    assert (run.counts()["new"], run.counts()["updated"]) == (1, 2)
    assert slack.count("/conversations.history") == 2  # one per channel, no listing
    assert slack.count("/conversations.replies") == 1  # the thread with a new reply
    assert "#secret-plans: Globex due diligence starts Monday." in visible_titles(tenant, bob)
    assert FREEZE in search_titles(tenant, bob, "staging frozen")
    assert "#general: Team lunch moves to Friday at the canteen." in visible_titles(tenant, bob)


def test_a_reply_to_a_thread_older_than_the_lookback_is_found_by_the_next_full_sync(tenant, slack, source):
    assert source_sync(source=source).status == "done"
    carol = member(tenant, "carol@example.com")
    slack.advance(days=10)
    slack.post("C1", "U1", "Office closed on Friday.")
    assert source_sync(source=source, scope="content").status == "done"
    slack.post("C1", "U3", "Is the staging cluster frozen as well?", thread=slack.freeze)

    content = source_sync(source=source, scope="content")
    full = source_sync(source=source)

    assert content.status == full.status == "done"
    assert content.counts()["updated"] == 0  # ten days older than the latest activity: left to the listing
    assert full.counts()["updated"] == 1
    assert FREEZE in search_titles(tenant, carol, "staging cluster frozen")


def test_a_thread_deleted_in_slack_leaves_search(tenant, slack, source):
    assert source_sync(source=source).status == "done"
    carol = member(tenant, "carol@example.com")
    assert LUNCH in search_titles(tenant, carol, "team lunch canteen")
    slack.delete("C1", slack.lunch)

    run = source_sync(source=source)

    assert run.status == "done", run.error
    assert run.counts()["deleted"] == 1
    assert LUNCH not in search_titles(tenant, carol, "team lunch canteen")
    assert LUNCH not in visible_titles(tenant, carol)


def test_a_member_removed_from_a_private_channel_no_longer_finds_its_threads(tenant, slack, source):
    alice, bob = member(tenant, "alice@example.com"), member(tenant, "bob@example.com")
    assert source_sync(source=source).status == "done"
    assert PLANS in search_titles(tenant, bob, "acquire Globex")
    slack.remove_member("C2", "U2")

    run = source_sync(source=source, scope="permissions")

    assert run.status == "done", run.error
    assert PLANS not in search_titles(tenant, bob, "acquire Globex")
    assert PLANS not in visible_titles(tenant, bob)
    assert PLANS in visible_titles(tenant, alice)
