"""The Confluence connector against a local stand-in of Confluence's REST APIs (v2 and v1),
through the real atlassian-python-api client."""

import time

import pytest

from knowledge.connectors.base import PUBLIC, CredentialRejected, Permission, SourceUnreachable
from knowledge.connectors.services import service_connector
from tests.connectors.standins.confluence import ConfluenceStandIn
from tests.factories import SourceFactory, TenantFactory

pytestmark = pytest.mark.django_db

DEPLOY_BODY = (
    "<h2>Before you start</h2><p>Ask the <strong>on-call</strong> engineer.</p>"
    '<ac:structured-macro ac:name="code"><ac:parameter ac:name="language">bash</ac:parameter>'
    "<ac:plain-text-body><![CDATA[make deploy ENV=prod && echo <done>]]></ac:plain-text-body></ac:structured-macro>"
    "<h2>Rollback</h2><ul><li>Revert the release tag</li><li>Redeploy</li></ul>"
)


@pytest.fixture(autouse=True)
def _loopback(settings):
    settings.KB_FETCH_ALLOWED_NETWORKS = ["127.0.0.1/32"]
    settings.KB_CONNECTOR_BACKOFF_S = 0


def build(standin):
    """ENG (the engineering group: Alice, Bob) with a deploy guide (a footer comment, an inline
    one, a Markdown runbook and a picture), a roadmap restricted to the leads (Alice) and its
    child page, and a blog post; COMPANY (confluence-users: everyone) with a holiday calendar;
    HR (Carol alone) with the salary bands."""
    standin.user("a1", "Alice Archer", "Alice@Example.com")
    standin.user("b1", "Bob Baker", "bob@example.com")
    standin.user("c1", "Carol Chen", "carol@example.com")
    standin.user("h1", "Hidden Hal", None)
    standin.group("g-eng", "engineering", ["a1", "b1", "h1"])
    standin.group("g-leads", "leads", ["a1"])
    standin.group("g-all", "confluence-users", ["a1", "b1", "c1", "h1"])
    standin.space("ENG", "Engineering", groups=["g-eng"])
    standin.space("COMPANY", "Company", groups=["g-all"])
    standin.space("HR", "Human Resources", users=["c1", "h1"])
    standin.deploy = standin.page("ENG", "Deploy guide", DEPLOY_BODY, by="a1")
    standin.comment(standin.deploy, "<p>Remember the <em>feature flags</em> too.</p>", by="b1")
    standin.comment(standin.deploy, "<p>typo here</p>", by="c1", location="inline")
    standin.runbook = standin.attachment(
        standin.deploy, "runbook.md", b"# Runbook\n\nPage the SRE team.", "text/markdown"
    )
    standin.attachment(standin.deploy, "diagram.png", b"\x89PNG...", "image/png")
    standin.roadmap = standin.page("ENG", "Secret roadmap", "<p>We enter the Mars market in 2026.</p>")
    standin.restrict(standin.roadmap, groups=["g-leads"])
    standin.details = standin.page("ENG", "Roadmap details", "<p>Rockets first.</p>", parent=standin.roadmap)
    standin.notes = standin.page("ENG", "Release notes 4.2", "<p>Faster search.</p>", kind="blogpost", by="b1")
    standin.holidays = standin.page("COMPANY", "Holiday calendar", "<p>Office closed on 24 December.</p>")
    standin.salaries = standin.page("HR", "Salary bands", "<table><tr><th>Band</th><td>L3</td></tr></table>")
    return standin


@pytest.fixture
def confluence():
    with ConfluenceStandIn() as standin:
        yield build(standin)


def connector(standin, **options):
    source = SourceFactory(
        tenant=TenantFactory(),
        kind="confluence",
        location=standin.site,
        secret=standin.token,
        options={"cloud": standin.cloud, **options},
    )
    return service_connector(source)


def by_key(items):
    return {item.key: item for item in items}


def test_first_changes_read_pages_blog_posts_and_attachments_with_comments_links_and_permissions(confluence):
    items = by_key(connector(confluence).changes({}))

    c = confluence
    assert set(items) == {
        f"page/{c.deploy}",
        f"page/{c.roadmap}",
        f"page/{c.details}",
        f"blogpost/{c.notes}",
        f"page/{c.holidays}",
        f"page/{c.salaries}",
        f"attachment/{c.runbook}",
    }  # the picture is not a type the readers take
    deploy = items[f"page/{c.deploy}"].documents[0]
    assert deploy.external_id == f"confluence/page/{c.deploy}"
    assert deploy.title == "Deploy guide"
    assert deploy.uri == f"{c.site}/spaces/ENG/pages/{c.deploy}/Deploy+guide"
    assert deploy.text.startswith("Deploy guide\n\nBefore you start\n\nAsk the on-call engineer.")
    assert "make deploy ENV=prod && echo <done>" in deploy.text
    assert "make deploy ENV=prod && echo <done>\n\nRollback\n\n- Revert the release tag\n- Redeploy" in deploy.text
    assert "Comments\n\nBob Baker (2024-03-01):\nRemember the feature flags too." in deploy.text
    assert "typo here" not in deploy.text  # inline comments are not appended
    assert [s.heading for s in deploy.sections] == ["Before you start", "Rollback", "Comments"]
    assert deploy.metadata == {
        "author": "Alice Archer",
        "place": "Engineering",
        "updated_at": deploy.published_at.isoformat(),
        "source_kind": "confluence",
    }
    assert deploy.published_at.isoformat() == "2024-03-01T09:02:00+00:00"  # the comment's time
    runbook = items[f"attachment/{c.runbook}"].documents[0]
    assert (runbook.title, runbook.text) == ("runbook.md", "# Runbook\n\nPage the SRE team.")
    assert runbook.uri.startswith(f"{c.site}/pages/viewpageattachments.action?pageId={c.deploy}")
    engineering = Permission.of(groups=["g-eng"])
    assert items[f"page/{c.deploy}"].permission == engineering
    assert items[f"attachment/{c.runbook}"].permission == engineering  # its page's
    assert items[f"page/{c.roadmap}"].permission == Permission.of(emails=["alice@example.com"])
    assert items[f"page/{c.details}"].permission == Permission.of(emails=["alice@example.com"])  # inherited
    assert items[f"blogpost/{c.notes}"].permission == engineering
    assert items[f"page/{c.holidays}"].permission == PUBLIC  # confluence-users: everyone
    assert items[f"page/{c.salaries}"].permission == Permission.of(emails=["carol@example.com"])  # Hal's is hidden
    assert items[f"page/{c.salaries}"].documents[0].text == "Salary bands\n\nBand L3"
    assert all(item.checkpoint and item.fingerprint == "1" for item in items.values())


def test_an_attachment_that_cannot_be_read_fails_alone(confluence):
    broken = confluence.attachment(confluence.holidays, "plan.pdf", b"not a pdf at all", "application/pdf")

    items = by_key(connector(confluence).changes({}))

    assert items[f"attachment/{broken}"].error.startswith("plan.pdf")
    assert items[f"attachment/{broken}"].documents == []
    assert items[f"page/{confluence.holidays}"].documents[0].title == "Holiday calendar"


def test_only_the_spaces_the_options_name_are_read_and_an_unknown_one_is_an_error(confluence):
    items = list(connector(confluence, spaces=["HR", "COMPANY"]).changes({}))

    assert {item.documents[0].metadata["place"] for item in items} == {"Human Resources", "Company"}
    with pytest.raises(SourceUnreachable, match="NOPE do not exist or the credential cannot see them"):
        list(connector(confluence, spaces=["HR", "NOPE"]).listing())


def test_incremental_changes_read_only_what_changed_in_requests_that_do_not_grow_with_the_pages(confluence):
    for n in range(300):
        confluence.page("COMPANY", f"Old note {n}", f"<p>Note number {n}.</p>")
    checkpoint = [item.checkpoint for item in connector(confluence).changes({})][-1]
    confluence.edit(confluence.holidays, "<p>Office closed from 24 to 26 December.</p>")
    fresh = confluence.page("ENG", "On-call rota", "<p>Bob this week.</p>", parent=confluence.deploy)
    confluence.reset_counts()

    items = list(connector(confluence).changes(checkpoint))

    assert [item.key for item in items] == [f"page/{confluence.holidays}", f"page/{fresh}"]
    assert "24 to 26 December" in items[0].documents[0].text
    assert items[0].fingerprint == "2"
    assert items[-1].checkpoint == {"since": "2024-03-01T14:12:00+00:00"}
    assert [cql for cql, _expand in confluence.searches] == [
        confluence.searches[0][0],  # what changed since the checkpoint: ids and versions
        f"id in ({confluence.holidays}, {fresh})",  # then their bodies and restrictions
        f"id in ({confluence.deploy})",  # and the restrictions of the new page's parent
    ]
    assert confluence.searches[0][0].startswith('lastmodified >= now("-')
    assert sum(path.endswith("/child/comment") for _method, path in confluence.requests) == 2
    assert confluence.count("/wiki/rest/api/content/") == 5  # nothing but those searches and comments
    assert len(confluence.requests) <= 12


def test_a_new_comment_makes_its_page_read_again(confluence):
    checkpoint = [item.checkpoint for item in connector(confluence).changes({})][-1]
    confluence.comment(confluence.holidays, "<p>And on 31 December?</p>", by="c1")

    [item] = connector(confluence).changes(checkpoint)

    assert item.key == f"page/{confluence.holidays}"
    assert item.documents[0].text.endswith("Carol Chen (2024-03-01):\nAnd on 31 December?")


def test_listing_names_every_version_and_a_deleted_page_leaves_it(confluence):
    before = dict(connector(confluence).listing())
    confluence.edit(confluence.notes, "<p>Faster search and dark mode.</p>")
    confluence.delete(confluence.salaries)

    after = dict(connector(confluence).listing())
    [notes, gone] = connector(confluence).fetch([f"blogpost/{confluence.notes}", f"page/{confluence.salaries}"])

    assert len(before) == 7 and f"attachment/{confluence.runbook}" in before
    assert set(before) - set(after) == {f"page/{confluence.salaries}"}
    assert after[f"blogpost/{confluence.notes}"] == "2" == notes.fingerprint
    assert "dark mode" in notes.documents[0].text
    assert gone.deleted


def test_listing_reads_large_spaces_in_pages_of_250(confluence):
    for n in range(600):
        confluence.page("COMPANY", f"Note {n}", "<p>x</p>")
    confluence.reset_counts()

    assert len(dict(connector(confluence).listing())) == 607
    company = confluence.spaces["COMPANY"]["id"]
    assert confluence.count(f"/wiki/api/v2/spaces/{company}/pages") == 3


def test_permissions_follow_a_page_restricted_and_a_user_removed_from_a_space(confluence):
    keys = [f"page/{confluence.holidays}", f"page/{confluence.salaries}", f"attachment/{confluence.runbook}"]
    confluence.restrict(confluence.holidays, users=["b1", "h1"])
    confluence.spaces["HR"]["users"].discard("c1")
    confluence.restrict(confluence.deploy, groups=["g-leads"], users=["b1"])

    permissions = dict(connector(confluence).permissions(keys))

    assert permissions == {
        keys[0]: Permission.of(emails=["bob@example.com"]),  # Hal's address is hidden
        keys[1]: Permission.of(),  # nobody left who can be mapped: admins only
        keys[2]: Permission.of(emails=["alice@example.com", "bob@example.com"]),
    }


def test_restrictions_a_search_leaves_out_are_asked_page_by_page(confluence):
    confluence.expands_restrictions = False
    keys = [f"page/{confluence.details}", f"attachment/{confluence.runbook}"]

    permissions = dict(connector(confluence).permissions(keys))

    assert permissions == {
        keys[0]: Permission.of(emails=["alice@example.com"]),
        keys[1]: Permission.of(groups=["g-eng"]),
    }
    restrictions = [p for _m, p in confluence.requests if p.endswith("/restriction/byOperation/read")]
    assert sorted(restrictions) == sorted(
        f"/wiki/rest/api/content/{page}/restriction/byOperation/read"
        for page in (confluence.details, confluence.roadmap, confluence.deploy)
    )


def test_a_page_whose_restrictions_cannot_be_read_fails_closed_with_its_children(confluence):
    confluence.unreadable.add(confluence.roadmap)

    permissions = dict(connector(confluence).permissions([f"page/{confluence.details}", f"page/{confluence.deploy}"]))

    assert permissions == {
        f"page/{confluence.details}": None,
        f"page/{confluence.deploy}": Permission.of(groups=["g-eng"]),
    }


def test_groups_give_each_groups_visible_member_emails_but_the_everyone_groups(confluence):
    groups = list(connector(confluence).groups())

    assert [(g.external_id, g.name, g.emails) for g in groups] == [
        ("g-eng", "confluence:group:engineering", {"alice@example.com", "bob@example.com"}),
        ("g-leads", "confluence:group:leads", {"alice@example.com"}),
    ]


def test_a_rate_limit_is_waited_out_as_retry_after_asks(confluence):
    confluence.fail_next(429, retry_after=1)
    started = time.monotonic()

    listing = dict(connector(confluence).listing())

    assert len(listing) == 7
    assert time.monotonic() - started >= 1
    assert confluence.count("/wiki/api/v2/spaces") - confluence.count("/wiki/api/v2/spaces/") == 2  # 429, retry


def test_server_errors_are_retried(confluence):
    confluence.fail_next(503, retry_after=None, count=2)
    confluence.fail_next(500, retry_after=None)

    assert len(dict(connector(confluence).listing())) == 7
    assert confluence.requests[:4] == [("GET", "/wiki/api/v2/spaces")] * 4


def test_a_server_that_keeps_failing_makes_the_source_unreachable(confluence, settings):
    settings.KB_CONNECTOR_RETRIES = 2
    confluence.fail_next(502, retry_after=None, count=3)

    with pytest.raises(SourceUnreachable, match="HTTP 502 after retries"):
        list(connector(confluence).listing())


def test_a_revoked_token_is_rejected_with_a_clear_message(confluence):
    confluence.revoke()

    with pytest.raises(CredentialRejected, match=r"refused the source's credential \(HTTP 401.*new token"):
        list(connector(confluence).changes({}))


def test_check_says_who_the_credential_is_and_what_it_sees(confluence):
    assert connector(confluence).check() == (
        "Confluence Cloud as Sync Bot (bot@example.com): 3 spaces (COMPANY, ENG, HR)"
    )


def test_a_location_at_a_private_address_is_refused(confluence, settings):
    settings.KB_FETCH_ALLOWED_NETWORKS = []

    with pytest.raises(SourceUnreachable, match="not allowed"):
        connector(confluence).check()
    assert confluence.requests == []


def test_data_center_is_read_with_a_personal_access_token_and_its_permissions_fail_closed():
    with ConfluenceStandIn(cloud=False) as server:
        build(server)
        source = connector(server)
        items = by_key(source.changes({}))
        checkpoint = [item.checkpoint for item in items.values()][-1]
        server.edit(server.deploy, "<p>Use the new pipeline.</p>")
        changed = list(connector(server).changes(checkpoint))
        listing = dict(connector(server).listing())

        assert len(items) == 7
        assert (
            items[f"page/{server.deploy}"].documents[0].uri
            == f"{server.site}/pages/viewpage.action?pageId={server.deploy}"
        )
        assert all(item.permission is None for item in items.values())
        assert [item.key for item in changed] == [f"page/{server.deploy}"]
        assert listing[f"page/{server.deploy}"] == "2"
        assert list(source.groups()) == []
        assert source.check() == "Confluence Data Center as Sync Bot: 3 spaces (COMPANY, ENG, HR)"
