"""The Jira connector against a local stand-in of Jira's REST API, through the real ``jira`` client."""

import time

import pytest

from core.outbound import AddressNotAllowed
from knowledge.connectors.base import PUBLIC, CredentialRejected, Permission, SourceGroup, SourceUnreachable
from knowledge.connectors.services import service_connector
from tests.connectors.standins.jira import JiraStandIn
from tests.factories import SourceFactory, TenantFactory

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def _loopback(settings):
    settings.KB_FETCH_ALLOWED_NETWORKS = ["127.0.0.1/32"]
    settings.KB_CONNECTOR_BACKOFF_S = 0


def build(standin: JiraStandIn, extra: int = 0) -> JiraStandIn:
    """ENG (every Jira user may browse it; ENG-3 has a security level for the leads and its
    reporter) and SEC (the Developers role, Alice, and the security-team group, Carol); ``extra``
    more ENG issues."""
    standin.user("alice", "Alice Archer", "Alice@Example.com")
    standin.user("bob", "Bob Baker", "bob@example.com")
    standin.user("carol", "Carol Chen", "carol@example.com")
    standin.user("hidden", "Hidden Hugo", None)
    standin.group("security-team", "carol")
    standin.group("leads", "alice", "bob")
    standin.project("ENG", "Engineering", lead="bob")
    standin.project("SEC", "Security", lead="carol", browse=[("projectRole", "10002"), ("group", "security-team")])
    standin.role("SEC", "10002", "Developers", users=["alice", "hidden"])
    standin.level("10100", ("group", "leads"), ("reporter", ""))
    standin.issue(
        "ENG", "Login page times out", "The login page times out after 30 s.", reporter="alice", assignee="bob"
    )
    standin.comment("ENG-1", "bob", "Reproduced on a 3G connection.")
    standin.comment("ENG-1", "alice", "Raising the timeout to 60 s.")
    standin.tick()
    standin.issue("ENG", "Upgrade the database", "PostgreSQL 16 to 17.", reporter="bob")
    standin.tick()
    standin.issue("ENG", "Salary bands for 2025", "Bands per level.", reporter="carol", level="10100")
    standin.tick()
    standin.issue("SEC", "Rotate the signing keys", "Every 90 days.", reporter="carol")
    for n in range(extra):
        standin.tick(0.5)
        standin.issue("ENG", f"Chore {n}", "Routine work.")
    standin.tick(3)
    return standin


@pytest.fixture
def jira():
    with JiraStandIn() as standin:
        yield build(standin)


def connector(standin, **options):
    source = SourceFactory(
        tenant=TenantFactory(), kind="jira", location=standin.url, secret=standin.token, options=options
    )
    return service_connector(source)


def by_key(items):
    return {item.key: item for item in items}


def test_first_changes_read_every_issue_with_its_comments_link_place_and_permission(jira):
    items = by_key(connector(jira).changes({}))

    assert list(items) == ["ENG-1", "ENG-2", "ENG-3", "SEC-1"]  # oldest change first
    login = items["ENG-1"].documents[0]
    assert login.title == "ENG-1: Login page times out"
    assert login.uri == f"{jira.url}browse/ENG-1"
    assert login.external_id.startswith("jira/127.0.0.1:") and login.external_id.endswith("/ENG-1")
    assert login.text.startswith("# ENG-1: Login page times out\n\n**Project:** Engineering (ENG) · ")
    assert "**Reporter:** Alice Archer · **Assignee:** Bob Baker" in login.text
    assert "The login page times out after 30 s." in login.text
    assert "## Comments" in login.text
    assert "**Bob Baker** (2024-03-01 14:00 UTC):\nReproduced on a 3G connection." in login.text
    assert login.metadata["author"] == "Alice Archer"
    assert login.metadata["place"] == "Engineering"
    assert login.metadata["source_kind"] == "jira"
    assert login.published_at.isoformat() == "2024-03-01T09:00:30-05:00"
    assert login.metadata["updated_at"] == login.published_at.isoformat()
    assert items["ENG-1"].fingerprint == "2024-03-01T09:00:30.000-0500"
    assert items["ENG-1"].permission == PUBLIC
    assert items["ENG-3"].permission == Permission.of(emails=["carol@example.com"], groups=["leads"])
    assert items["SEC-1"].permission == Permission.of(emails=["alice@example.com"], groups=["security-team"])
    assert all(item.checkpoint for item in items.values())


def test_only_the_projects_named_in_the_options_are_read(jira):
    assert set(by_key(connector(jira, projects=["sec"]).changes({}))) == {"SEC-1"}
    assert [key for key, _ in connector(jira, projects=["SEC"]).listing()] == ["SEC-1"]


def test_a_project_the_credential_cannot_browse_stops_the_read_before_anything_is_deleted(jira):
    with pytest.raises(SourceUnreachable, match="cannot browse the project.*OPS"):
        list(connector(jira, projects=["ENG", "OPS"]).listing())


def _incremental(extra: int):
    """Requests of an incremental ``changes`` after one edit and one new issue, with ``extra`` issues."""
    with JiraStandIn() as standin:
        build(standin, extra)
        jira = connector(standin)
        checkpoint = [item.checkpoint for item in jira.changes({})][-1]
        standin.edit("ENG-2", summary="Upgrade the database to PostgreSQL 17")
        standin.tick()
        new = standin.issue("SEC", "Audit the VPN logs", "Monthly.", reporter="alice")
        standin.reset_counts()
        items = by_key(jira.changes(checkpoint))
        return items, new, list(standin.requests)


def test_an_incremental_change_reads_only_the_edited_and_the_new_issue_whatever_the_number_of_issues():
    items, new, requests = _incremental(extra=3)

    assert set(items) == {"ENG-2", new}
    assert items["ENG-2"].documents[0].title == "ENG-2: Upgrade the database to PostgreSQL 17"
    assert items[new].permission == Permission.of(emails=["alice@example.com"], groups=["security-team"])
    assert [path for _, path in requests if path.startswith("/rest/api/2/search")] == ["/rest/api/2/search/jql"]
    assert not [path for _, path in requests if path.startswith("/rest/api/2/issue/")]
    _, _, many = _incremental(extra=250)
    assert len(many) == len(requests)


def test_the_boundary_minute_is_read_again_for_late_issues_but_skips_those_already_read(jira):
    source = connector(jira)
    checkpoint = [item.checkpoint for item in source.changes({})][-1]
    assert checkpoint["seen"] == {"SEC-1": "2024-03-01T09:03:30.000-0500"}
    jira.clock = jira.issues["SEC-1"]["updated"].replace(second=10)  # indexed late, in the same minute
    late = jira.issue("SEC", "Revoke the old certificates", "Before Friday.", reporter="carol")

    assert list(by_key(source.changes(checkpoint))) == [late]


def test_listing_gives_every_key_with_its_update_time_and_no_longer_names_a_deleted_issue(jira):
    source = connector(jira)
    listed = dict(source.listing())
    assert set(listed) == {"ENG-1", "ENG-2", "ENG-3", "SEC-1"}
    assert listed["ENG-2"] == "2024-03-01T09:01:30.000-0500"

    jira.delete("ENG-2")

    assert "ENG-2" not in dict(source.listing())


def test_fetch_reads_an_issue_again_and_says_a_deleted_one_is_gone(jira):
    source = connector(jira)
    jira.edit("ENG-1", description="Fixed by raising the timeout.")
    jira.delete("ENG-2")

    items = by_key(source.fetch(["ENG-1", "ENG-2"]))

    assert "Fixed by raising the timeout." in items["ENG-1"].documents[0].text
    assert items["ENG-1"].permission == PUBLIC
    assert items["ENG-2"].deleted


def test_comments_past_the_first_page_are_read_too(jira):
    jira.comments_embedded = 2
    for n in range(5):
        jira.comment("ENG-2", "bob", f"Progress note {n}.")

    text = by_key(connector(jira).fetch(["ENG-2"]))["ENG-2"].documents[0].text

    assert all(f"Progress note {n}." in text for n in range(5))


def test_permissions_follow_a_member_removed_from_the_project_role(jira):
    source = connector(jira)
    assert dict(source.permissions(["SEC-1"]))["SEC-1"].emails == {"alice@example.com"}

    jira.role("SEC", "10002", "Developers", users=["hidden"])

    assert dict(source.permissions(["SEC-1", "ENG-1", "ENG-3"])) == {
        "SEC-1": Permission.of(groups=["security-team"]),
        "ENG-1": PUBLIC,
        "ENG-3": Permission.of(emails=["carol@example.com"], groups=["leads"]),
    }


def test_in_a_restricted_project_a_security_level_keeps_only_the_people_in_both(jira):
    jira.level("10200", ("group", "leads"))
    key = jira.issue("SEC", "Incident review", "Only the leads.", level="10200")

    permission = dict(connector(jira).permissions([key]))[key]

    assert permission == Permission.of(emails=["alice@example.com"])  # a lead and a Developer; Bob is neither


def test_single_users_and_the_project_lead_are_mapped_but_not_grants_that_depend_on_the_issue(jira):
    jira.project("OPS", "Operations", lead="carol", browse=[("user", "bob"), ("projectLead", ""), ("reporter", "")])
    key = jira.issue("OPS", "Renew the TLS certificates", reporter="alice")

    permission = dict(connector(jira).permissions([key]))[key]

    assert permission == Permission.of(emails=["bob@example.com", "carol@example.com"])  # not Alice, the reporter


def test_anyone_in_a_security_level_leaves_the_project_grants_alone(jira):
    jira.level("10300", ("applicationRole", ""))
    key = jira.issue("SEC", "Pen test results", level="10300")

    assert dict(connector(jira).permissions([key]))[key] == Permission.of(
        emails=["alice@example.com"], groups=["security-team"]
    )


def test_a_security_level_that_cannot_be_listed_fails_closed_on_data_center():
    with JiraStandIn(cloud=False) as standin:
        build(standin)
        permissions = dict(connector(standin).permissions(["ENG-1", "ENG-3", "SEC-1"]))

    assert permissions["ENG-1"] == PUBLIC
    assert permissions["ENG-3"] is None
    assert permissions["SEC-1"] == Permission.of(emails=["alice@example.com"], groups=["security-team"])


def test_without_the_right_to_read_permission_schemes_every_issue_fails_closed():
    with JiraStandIn(admin=False) as standin:
        build(standin)
        source = connector(standin)
        items = by_key(source.changes({}))
        line = source.check()

    assert {key: item.permission for key, item in items.items()} == dict.fromkeys(items)
    assert "readable in 0 of 2" in line and "admins only" in line


def test_groups_give_the_members_of_every_group_the_permissions_name(jira):
    groups = {group.external_id: group for group in connector(jira).groups()}

    assert groups == {
        "leads": SourceGroup("leads", "jira:group:leads", frozenset({"alice@example.com", "bob@example.com"})),
        "security-team": SourceGroup("security-team", "jira:group:security-team", frozenset({"carol@example.com"})),
    }


def test_data_center_is_read_with_a_personal_access_token_page_by_page():
    with JiraStandIn(cloud=False) as standin:
        build(standin, extra=230)
        source = connector(standin)
        standin.reset_counts()
        listed = dict(source.listing())
        searches = standin.count("/rest/api/2/search")
        items = by_key(source.changes({}))

    assert len(listed) == 234 and len(items) == 234
    assert searches == 3  # 100 a page
    assert items["SEC-1"].documents[0].uri == f"{standin.url}browse/SEC-1"


def test_a_rate_limit_with_retry_after_is_waited_out(jira):
    source = connector(jira)
    list(source.listing())
    jira.reset_counts()
    jira.fail_next(429, retry_after=1)

    started = time.monotonic()
    listed = dict(source.listing())

    assert len(listed) == 4
    assert time.monotonic() - started >= 0.9
    assert jira.count("/rest/api/2/") == 3  # the project list (refused, then again) and the search
    assert jira.requests[0] == jira.requests[1]  # the refused request was sent again


def test_a_rate_limit_asking_for_a_long_pause_fails_the_call_instead_of_waiting(jira):
    jira.fail_next(429, retry_after=3600)

    started = time.monotonic()
    with pytest.raises(SourceUnreachable, match="asked to wait 3600 s"):
        list(connector(jira).listing())
    assert time.monotonic() - started < 30


def test_a_server_error_is_retried(jira):
    jira.fail_next(500, retry_after=None, count=2)

    assert len(dict(connector(jira).listing())) == 4


def test_a_server_that_keeps_failing_makes_the_source_unreachable_after_one_layer_of_retries(jira, settings):
    settings.KB_CONNECTOR_RETRIES = 3
    jira.fail_next(503, retry_after=None, count=50)

    with pytest.raises(SourceUnreachable, match="HTTP 503"):
        list(connector(jira).listing())
    assert jira.count("/rest/api/2/project") == 4  # the jira client's own retry loop adds none


def test_a_revoked_token_is_refused_with_a_clear_message(jira):
    source = connector(jira)
    jira.revoke()

    with pytest.raises(CredentialRejected, match="refused the source's credential.*revoked or has expired"):
        list(source.changes({}))


def test_check_says_who_the_credential_is_and_what_it_reads(jira):
    line = connector(jira).check()

    assert line == (
        "Jira Cloud as Sync Bot <bot@example.com>: 2 projects (ENG, SEC); who may browse them readable in 2 of 2."
    )


def test_a_site_on_an_address_the_operator_has_not_opened_is_never_contacted(jira, settings):
    settings.KB_FETCH_ALLOWED_NETWORKS = []

    with pytest.raises(AddressNotAllowed):
        list(connector(jira).listing())
    assert jira.requests == []
