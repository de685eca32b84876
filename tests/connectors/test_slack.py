"""The Slack connector against a local stand-in of Slack's Web API, through the real slack_sdk client."""

import time

import pytest

from core.errors import InvalidInput
from knowledge.connectors.base import PUBLIC, CredentialRejected, Permission, SourceUnreachable
from knowledge.connectors.services import service_connector
from tests.connectors.standins.slack import SlackStandIn
from tests.factories import SourceFactory, TenantFactory

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def _loopback(settings):
    settings.KB_FETCH_ALLOWED_NETWORKS = ["127.0.0.1/32"]
    settings.KB_CONNECTOR_BACKOFF_S = 0


@pytest.fixture
def slack():
    """A workspace: #general (public, a thread of three and a message alone), #secret-plans
    (private: Alice and Bob), #design (public), and #random, which the app is not in."""
    with SlackStandIn() as standin:
        standin.add_user("U1", "Alice Archer", "Alice@Example.com")
        standin.add_user("U2", "Bob Baker", "bob@example.com")
        standin.add_user("U3", "Carol Chen", "carol@example.com")
        standin.add_user("U4", "Dave Former", "dave@example.com", deleted=True)
        standin.add_user("UB", "Deploy Bot", bot=True)
        standin.add_channel("C1", "general", members=["U1", "U2", "U3"])
        standin.add_channel("C2", "secret-plans", private=True, members=["U1", "U2", "U4"])
        standin.add_channel("C3", "design", members=["U3"])
        standin.add_channel("C4", "random", member=False, members=["U1"])
        standin.post("C1", "U1", "channel joined", subtype="channel_join")
        standin.freeze = standin.post("C1", "U1", "Deploy freeze starts Friday, ask <@U2> for exceptions.")
        standin.post("C1", "U2", "Does it cover hotfixes?", thread=standin.freeze)
        standin.hotfix = standin.post(
            "C1", "U1", "Hotfixes go through <#C1|general> review &amp; QA &lt;3.", thread=standin.freeze
        )
        standin.lunch = standin.post("C1", "U3", "Lunch on Thursday at <https://food.example.com|the canteen>?")
        standin.plans = standin.post("C2", "U1", "We plan to acquire Globex in spring.")
        standin.palette = standin.post("C3", "U3", "The new colour palette is teal and sand.")
        standin.post("C4", "U1", "Nothing from here should be read.")
        yield standin


def connector(standin, **options):
    source = SourceFactory(
        tenant=TenantFactory(), kind="slack", location=standin.url, secret=standin.token, options=options
    )
    return service_connector(source)


def by_key(items):
    return {item.key: item for item in items}


def test_first_changes_read_every_thread_with_its_replies_author_link_and_permission(slack):
    items = by_key(connector(slack).changes({}))

    assert set(items) == {f"C1/{slack.freeze}", f"C1/{slack.lunch}", f"C2/{slack.plans}", f"C3/{slack.palette}"}
    freeze = items[f"C1/{slack.freeze}"].documents[0]
    assert freeze.title == "#general: Deploy freeze starts Friday, ask @Bob Baker for exceptions."
    assert freeze.external_id == f"slack/C1/{slack.freeze}"
    assert freeze.uri == f"https://acme.slack.com/archives/C1/p{slack.freeze.replace('.', '')}"
    assert freeze.text.startswith("Alice Archer, 2023-11-14 22:13 UTC:\nDeploy freeze starts Friday")
    assert "## Replies\n\nBob Baker, " in freeze.text
    assert "Hotfixes go through #general review & QA <3." in freeze.text
    assert [section.heading for section in freeze.sections] == ["Replies"]
    assert freeze.metadata == {
        "author": "Alice Archer",
        "place": "#general",
        "updated_at": freeze.published_at.isoformat(),
        "source_kind": "slack",
    }
    assert freeze.published_at.timestamp() == pytest.approx(float(slack.hotfix))  # the latest reply
    assert "the canteen (https://food.example.com)" in items[f"C1/{slack.lunch}"].documents[0].text
    assert items[f"C1/{slack.freeze}"].permission == PUBLIC
    assert items[f"C2/{slack.plans}"].permission == Permission.of(groups=["C2"])
    assert all(item.checkpoint for item in items.values())


def test_only_the_channels_the_options_name_are_read(slack):
    items = list(connector(slack, channels=["#design", "C2"]).changes({}))

    assert {item.key.split("/")[0] for item in items} == {"C2", "C3"}


def test_incremental_changes_read_new_and_edited_threads_in_requests_that_do_not_grow_with_the_threads(slack):
    for n in range(2500):
        slack.post("C3", "U3", f"Old message {n}")
    slack.advance(days=30)
    recent = slack.post("C1", "U1", "Quarterly planning starts next week.")
    slack.post("C1", "U2", "Which teams?", thread=recent)
    checkpoint = [item.checkpoint for item in connector(slack).changes({})][-1]
    slack.edit("C1", recent, "Quarterly planning starts next Monday.")
    fresh = slack.post("C3", "U1", "A brand new idea about the palette.")
    slack.reset_counts()

    items = list(connector(slack).changes(checkpoint))

    assert [item.key for item in items] == [f"C1/{recent}", f"C3/{fresh}"]
    assert "Quarterly planning starts next Monday." in items[0].documents[0].text
    assert "Which teams?" in items[0].documents[0].text
    assert items[-1].checkpoint["channels"]["C3"] == fresh
    assert slack.count("/conversations.history") == 3  # one per channel, for 2,500 older threads
    assert slack.count("/conversations.replies") == 1  # the edited thread, which has a reply
    assert len(slack.requests) <= 8


def test_changes_find_a_new_reply_to_a_recent_thread_but_leave_older_ones_to_the_listing(slack):
    checkpoint = [item.checkpoint for item in connector(slack).changes({})][-1]
    slack.advance(days=10)
    recent = slack.post("C3", "U3", "Teal it is.")
    checkpoint = [item.checkpoint for item in connector(slack).changes(checkpoint)][-1]
    slack.post("C3", "U1", "Agreed.", thread=recent)
    slack.post("C1", "U3", "Does the freeze cover staging?", thread=slack.freeze)  # 10 days old

    items = list(connector(slack).changes(checkpoint))
    listing = dict(connector(slack).listing())

    assert [item.key for item in items] == [f"C3/{recent}"]
    assert "Agreed." in items[0].documents[0].text
    assert listing[f"C1/{slack.freeze}"].startswith("3/")  # three replies now: the full sync reads it again


def test_a_lookback_that_is_not_a_number_of_days_is_refused(slack):
    with pytest.raises(InvalidInput, match="lookback_days"):
        connector(slack, lookback_days="a week")


def test_listing_changes_the_fingerprint_of_an_edited_or_answered_thread_and_fetch_reads_it(slack):
    before = dict(connector(slack).listing())
    slack.edit("C1", slack.lunch, "Lunch moved to Friday.")
    slack.post("C3", "U1", "Sand is too pale.", thread=slack.palette)

    after = dict(connector(slack).listing())
    changed = sorted(key for key in after if after[key] != before[key])
    items = by_key(connector(slack).fetch(changed))

    assert changed == sorted([f"C1/{slack.lunch}", f"C3/{slack.palette}"])
    assert items[f"C1/{slack.lunch}"].documents[0].text.endswith("(edited):\nLunch moved to Friday.")
    assert "Sand is too pale." in items[f"C3/{slack.palette}"].documents[0].text
    assert items[f"C3/{slack.palette}"].fingerprint == after[f"C3/{slack.palette}"]


def test_a_deleted_thread_leaves_the_listing_and_a_deleted_reply_leaves_its_thread(slack):
    reply = slack.post("C3", "U1", "This reply will go.", thread=slack.palette)
    slack.delete("C1", slack.lunch)
    slack.delete("C3", reply)
    listing = dict(connector(slack).listing())

    assert f"C1/{slack.lunch}" not in listing
    assert set(listing) == {f"C1/{slack.freeze}", f"C2/{slack.plans}", f"C3/{slack.palette}"}
    [deleted, palette] = connector(slack).fetch([f"C1/{slack.lunch}", f"C3/{slack.palette}"])
    assert deleted.deleted
    assert "This reply will go." not in palette.documents[0].text


def test_long_histories_and_threads_are_read_page_by_page(slack):
    for n in range(2100):
        slack.post("C3", "U3", f"Design note {n}")
    for n in range(1005):
        slack.post("C3", "U1", f"Reply {n}", thread=slack.palette)

    listing = dict(connector(slack).listing())
    [palette] = connector(slack).fetch([f"C3/{slack.palette}"])

    assert len(listing) == 4 + 2100
    assert slack.count("/conversations.history") == 1 + 1 + 3  # #design's 2,101 threads in pages of 999
    assert palette.documents[0].text.count("Alice Archer, ") == 1005
    assert slack.count("/conversations.replies") == 2  # the parent and 1,005 replies in pages of 1,000


def test_the_threads_of_a_channel_the_app_left_are_gone(slack):
    slack.leave("C3")

    assert f"C3/{slack.palette}" not in dict(connector(slack).listing())
    assert [item.deleted for item in connector(slack).fetch([f"C3/{slack.palette}"])] == [True]


def test_groups_give_each_private_channels_members_by_email(slack):
    groups = list(connector(slack).groups())

    assert [(group.external_id, group.name) for group in groups] == [("C2", "slack:#secret-plans")]
    assert groups[0].emails == {"alice@example.com", "bob@example.com"}  # Dave was deactivated


def test_a_member_removed_from_a_channel_leaves_its_group(slack):
    slack.remove_member("C2", "U2")

    [group] = connector(slack).groups()

    assert group.emails == {"alice@example.com"}


def test_permissions_follow_a_channel_made_private(slack):
    keys = [f"C3/{slack.palette}", f"C1/{slack.lunch}"]
    slack.make_private("C3")

    permissions = dict(connector(slack).permissions(keys))

    assert permissions == {keys[0]: Permission.of(groups=["C3"]), keys[1]: PUBLIC}


def test_a_channel_whose_members_cannot_be_read_fails_closed(slack):
    slack.refuse_members("C2")
    source = connector(slack)

    assert dict(source.permissions([f"C2/{slack.plans}"])) == {f"C2/{slack.plans}": None}
    assert list(source.groups()) == []


def test_a_rate_limit_is_waited_out_as_retry_after_asks(slack):
    slack.fail_next(429, retry_after=1)
    started = time.monotonic()

    listing = dict(connector(slack).listing())

    assert len(listing) == 4
    assert time.monotonic() - started >= 1
    assert slack.count("/conversations.list") == 2  # the 429, then the retry


def test_server_errors_are_retried(slack):
    slack.fail_next(503, retry_after=None, count=2)
    slack.fail_next(500, retry_after=None)

    assert len(dict(connector(slack).listing())) == 4
    assert slack.count("/conversations.list") == 4


def test_a_server_that_keeps_failing_makes_the_source_unreachable(slack, settings):
    settings.KB_CONNECTOR_RETRIES = 2
    slack.fail_next(502, retry_after=None, count=3)

    with pytest.raises(SourceUnreachable, match="HTTP 502 after retries"):
        list(connector(slack).listing())


def test_a_server_that_cannot_be_reached_makes_the_source_unreachable(slack, settings):
    settings.KB_CONNECTOR_RETRIES = 1
    source = connector(slack)
    slack.__exit__(None, None, None)  # the port is closed from now on

    with pytest.raises(SourceUnreachable, match="could not be reached"):
        source.check()


def test_a_revoked_token_is_rejected_with_a_clear_message(slack):
    slack.revoke()

    with pytest.raises(CredentialRejected, match="refused the source's token on conversations.list: token_revoked"):
        list(connector(slack).changes({}))


def test_check_says_what_the_token_sees(slack):
    assert connector(slack).check() == "Acme: 3 channels the app is in (1 private), 3 people"
    assert connector(slack, channels=["general", "#nope"]).check() == (
        "Acme: 1 selected channels the app is in (0 private), 3 people; not found, or the app is not in them: #nope"
    )


def test_a_location_at_a_private_address_is_refused(slack, settings):
    settings.KB_FETCH_ALLOWED_NETWORKS = []

    with pytest.raises(SourceUnreachable, match="not allowed"):
        connector(slack).check()
    assert slack.requests == []
