"""The Notion connector against a local stand-in of Notion's API, through the real notion_client client."""

import time
from datetime import UTC, datetime

import pytest

from core.errors import InvalidInput
from knowledge.connectors.base import PUBLIC, CredentialRejected, SourceUnreachable
from knowledge.connectors.services import service_connector
from tests.connectors.standins.notion import (
    NotionStandIn,
    bullet,
    code,
    column_list,
    heading,
    numbered,
    paragraph,
    table,
    todo,
)
from tests.factories import SourceFactory, TenantFactory

pytestmark = pytest.mark.django_db

STATUS = {"id": "st", "type": "status", "status": {"id": "1", "name": "In progress", "color": "blue"}}
TAGS = {"id": "tg", "type": "multi_select", "multi_select": [{"name": "rocket"}, {"name": "q1"}]}


@pytest.fixture(autouse=True)
def _loopback(settings):
    settings.KB_FETCH_ALLOWED_NETWORKS = ["127.0.0.1/32"]
    settings.KB_CONNECTOR_BACKOFF_S = 0


@pytest.fixture
def notion():
    """The Acme workspace: a handbook (every kind of block), a security policy under it, a
    Projects database under it with one row, and meeting notes whose retro page sits in a column;
    each page edited in its own minute."""
    with NotionStandIn() as standin:
        standin.ada = standin.add_user("Ada Lovelace", "ada@example.com")
        standin.bob = standin.add_user("Bob Baker", "bob@example.com")
        standin.handbook = standin.add_page(
            "Team handbook",
            [
                heading(1, "Onboarding"),
                paragraph("Every new engineer pairs with a buddy for two weeks."),
                bullet("Laptop setup", [bullet("Install the VPN client")]),
                numbered("Read the security policy"),
                numbered("Meet the team"),
                todo("Sign the NDA", checked=True),
                todo("Book the welcome lunch"),
                code("print('hello')"),
                table([["Tool", "Owner"], ["VPN", "IT desk"]]),
            ],
            author=standin.ada,
        )
        standin.tick()
        standin.security = standin.add_page(
            "Security policy",
            [paragraph("Rotate passwords every ninety days.")],
            parent=standin.handbook,
            author=standin.bob,
        )
        standin.tick()
        standin.projects = standin.add_database("Projects", parent=standin.handbook)
        standin.apollo = standin.add_page(
            "Apollo launch",
            [paragraph("The launch window opens in March.")],
            database=standin.projects,
            properties={"Status": STATUS, "Tags": TAGS},
            author=standin.bob,
        )
        standin.tick()
        standin.meeting = standin.add_page("Meeting notes", [column_list([paragraph("Left")], [paragraph("Right")])])
        column = standin.block_ids(standin.meeting, "column")[0]
        standin.retro = standin.add_page("Sprint retro", [paragraph("Ship smaller changes.")], parent=column)
        standin.tick()
        yield standin


def connector(standin, **options):
    source = SourceFactory(
        tenant=TenantFactory(), kind="notion", location=standin.url, secret=standin.token, options=options
    )
    return service_connector(source)


def by_key(items):
    return {item.key: item for item in items}


def test_first_changes_read_every_page_and_row_with_its_text_title_link_place_and_permission(notion):
    items = by_key(connector(notion).changes({}))

    assert set(items) == {notion.handbook, notion.security, notion.apollo, notion.meeting, notion.retro}
    handbook = items[notion.handbook].documents[0]
    assert handbook.title == "Team handbook"
    assert handbook.external_id == f"notion/{notion.handbook}"
    assert handbook.uri == notion.pages[notion.handbook]["url"]
    assert handbook.text.startswith("# Team handbook\n\n## Onboarding\n\nEvery new engineer pairs with a buddy")
    assert "- Laptop setup\n  - Install the VPN client" in handbook.text
    assert "1. Read the security policy\n2. Meet the team" in handbook.text
    assert "- [x] Sign the NDA\n- [ ] Book the welcome lunch\n\n```python\nprint('hello')\n```" in handbook.text
    assert "| Tool | Owner |\n| --- | --- |\n| VPN | IT desk |" in handbook.text
    assert f"[Security policy](https://www.notion.so/{notion.security.replace('-', '')})" in handbook.text
    assert "[Projects](" in handbook.text
    assert [section.heading for section in handbook.sections][:2] == ["Team handbook", "Onboarding"]
    assert handbook.metadata == {
        "author": "Ada Lovelace",
        "place": "Acme",
        "updated_at": "2025-01-06T09:00:00+00:00",
        "source_kind": "notion",
    }
    assert handbook.published_at.isoformat() == "2025-01-06T09:00:00+00:00"
    assert items[notion.security].documents[0].metadata["place"] == "Team handbook"
    assert items[notion.retro].documents[0].metadata["place"] == "Meeting notes"  # the page its column is on
    assert all(item.permission == PUBLIC and item.fingerprint for item in items.values())


def test_a_database_row_reads_its_properties_and_is_placed_in_its_database(notion):
    apollo = by_key(connector(notion).changes({}))[notion.apollo].documents[0]

    assert apollo.title == "Apollo launch"
    assert (
        apollo.text == "# Apollo launch\n\nStatus: In progress\nTags: rocket, q1\n\nThe launch window opens in March."
    )
    assert apollo.metadata["place"] == "Projects"
    assert apollo.metadata["author"] == "Bob Baker"


def test_changes_come_oldest_first_the_last_of_each_minute_with_the_checkpoint_to_resume_from(notion):
    items = list(connector(notion).changes({}))

    assert [item.key for item in items] == [
        notion.handbook,
        notion.security,
        notion.apollo,
        notion.meeting,
        notion.retro,
    ]
    # The meeting notes and the retro share a minute: only the last of them says the minute is stored.
    assert [item.checkpoint is not None for item in items] == [True, True, True, False, True]
    assert items[-1].checkpoint["edited"] == notion.pages[notion.retro]["last_edited_time"]
    resumed = [item.key for item in connector(notion).changes(items[2].checkpoint)]
    assert resumed == [notion.meeting, notion.retro]


def test_an_incremental_changes_reads_only_what_changed_whatever_the_number_of_pages(notion):
    for n in range(150):
        notion.add_page(f"Weekly report {n}", [paragraph(f"Report number {n}.")])
    checkpoint = list(connector(notion).changes({}))[-1].checkpoint
    notion.tick(5)
    notion.edit(notion.security, [paragraph("Rotate passwords every thirty days.")])
    fresh = notion.add_page("Incident review", [paragraph("The VPN was down for an hour.")], parent=notion.handbook)
    notion.reset_counts()

    items = by_key(connector(notion).changes(checkpoint))

    assert set(items) == {notion.security, fresh}
    assert "thirty days" in items[notion.security].documents[0].text
    assert items[fresh].documents[0].metadata["place"] == "Team handbook"
    assert notion.count("/v1/search") == 1
    assert notion.count("/v1/blocks/") == 2
    assert len(notion.requests) <= 6  # and once per place (a parent page) and author


def test_changes_since_the_last_sync_with_nothing_edited_are_none_for_one_request(notion):
    checkpoint = list(connector(notion).changes({}))[-1].checkpoint
    notion.reset_counts()

    assert list(connector(notion).changes(checkpoint)) == []
    assert notion.requests == [("POST", "/v1/search")]


def test_the_pages_of_a_minute_not_over_yet_are_read_again_so_a_later_edit_in_it_is_not_lost(notion):
    notion.now = datetime.now(UTC)  # the stand-in's clock is the real one: its minute is not over
    notion.edit(notion.retro, [paragraph("Ship smaller changes.")])
    checkpoint = list(connector(notion).changes({}))[-1].checkpoint
    notion.edit(notion.retro, [paragraph("Ship smaller changes, review them faster.")])  # the same minute

    items = by_key(connector(notion).changes(checkpoint))

    assert set(items) == {notion.retro}
    assert "review them faster" in items[notion.retro].documents[0].text


def test_a_long_page_is_read_across_pages_of_blocks(notion):
    long = notion.add_page("Runbook", [paragraph(f"Step {n} of the runbook.") for n in range(250)])
    notion.reset_counts()

    item = next(connector(notion).fetch([long]))

    assert "Step 0 of the runbook." in item.documents[0].text
    assert "Step 249 of the runbook." in item.documents[0].text
    assert notion.count(f"/v1/blocks/{long}/children") == 3


def test_listing_names_every_shared_page_a_hundred_at_a_time_and_no_longer_a_trashed_or_unshared_one(notion):
    for n in range(120):
        notion.add_page(f"Note {n}", [paragraph("x")])
    notion.reset_counts()

    listed = dict(connector(notion).listing())

    assert len(listed) == 125
    assert listed[notion.handbook] == notion.pages[notion.handbook]["last_edited_time"]
    assert notion.count("/v1/search") == 2
    notion.trash(notion.security)
    notion.unshare(notion.apollo)
    assert set(listed) - set(dict(connector(notion).listing())) == {notion.security, notion.apollo}


def test_fetch_reads_pages_again_and_reports_trashed_or_unshared_ones_deleted(notion):
    notion.trash(notion.security)
    notion.unshare(notion.apollo)

    items = by_key(connector(notion).fetch([notion.handbook, notion.security, notion.apollo]))

    assert items[notion.handbook].documents[0].title == "Team handbook"
    assert items[notion.security].deleted and items[notion.apollo].deleted
    assert not items[notion.security].documents


def test_every_page_is_public_to_the_tenant_and_there_are_no_groups(notion):
    reader = connector(notion)
    notion.reset_counts()

    assert dict(reader.permissions([notion.handbook, notion.apollo])) == {
        notion.handbook: PUBLIC,
        notion.apollo: PUBLIC,
    }
    assert list(reader.groups()) == []
    assert notion.requests == []  # Notion's API has nothing to ask about who may read a page


def test_a_page_unshared_from_the_integration_leaves_the_listing(notion):
    reader = connector(notion)
    assert notion.security in dict(reader.listing())

    notion.unshare(notion.security)

    assert notion.security not in dict(reader.listing())


def test_a_rate_limited_request_waits_for_retry_after_and_is_tried_again(notion):
    notion.fail_next(429, retry_after=1)
    started = time.monotonic()

    listed = dict(connector(notion).listing())

    assert time.monotonic() - started >= 0.9
    assert notion.handbook in listed
    assert notion.requests[0] == notion.requests[1] == ("POST", "/v1/search")


def test_a_server_error_is_retried_also_for_a_search(notion):
    notion.fail_next(502, retry_after=None, count=2)

    listed = dict(connector(notion).listing())

    assert len(listed) == 5
    assert notion.count("/v1/search") == 3


def test_a_service_that_keeps_failing_is_unreachable(notion, settings):
    settings.KB_CONNECTOR_RETRIES = 2
    notion.fail_next(503, retry_after=None, count=10)

    with pytest.raises(SourceUnreachable, match="HTTP 503 after retries"):
        dict(connector(notion).listing())
    assert notion.count("/v1/search") == 3


def test_a_revoked_token_is_rejected_with_a_clear_message(notion):
    reader = connector(notion)
    notion.revoke()

    with pytest.raises(CredentialRejected, match="revoked or has expired.*new token") as caught:
        list(reader.changes({}))
    assert "API token is invalid" in caught.value.message


def test_an_integration_that_may_not_read_content_is_rejected_with_what_to_give_it(notion):
    notion.read_content = False

    with pytest.raises(CredentialRejected, match="HTTP 403.*Read content"):
        dict(connector(notion).listing())


def test_an_answer_past_the_size_cap_makes_the_source_unreachable(notion, monkeypatch):
    monkeypatch.setattr("knowledge.connectors.services.notion.MAX_RESPONSE_BYTES", 2000)

    with pytest.raises(SourceUnreachable, match="answer larger than"):
        dict(connector(notion).listing())


def test_check_says_what_the_integration_sees(notion):
    assert connector(notion).check() == (
        "Notion Acme, as the integration Knowledge base: 5 pages shared with it (1 of them database rows), "
        "each visible to the whole tenant."
    )


def test_without_user_information_authors_are_user_ids_asked_once(notion):
    notion.user_info = False
    notion.reset_counts()

    items = by_key(connector(notion).changes({}))

    assert items[notion.handbook].documents[0].metadata["author"] == notion.ada
    assert items[notion.apollo].documents[0].metadata["author"] == notion.bob
    assert notion.count("/v1/users/") - notion.count("/v1/users/me") == 1


def test_databases_false_leaves_database_rows_out(notion):
    reader = connector(notion, databases=False)

    assert notion.apollo not in by_key(reader.changes({}))
    assert notion.apollo not in dict(reader.listing())
    assert next(reader.fetch([notion.apollo])).deleted


def test_an_unknown_option_is_refused(notion):
    with pytest.raises(InvalidInput, match="Unknown Notion option"):
        connector(notion, spaces=["ENG"])


def test_a_loopback_server_is_refused_unless_the_operator_opened_it(notion, settings):
    settings.KB_FETCH_ALLOWED_NETWORKS = []

    with pytest.raises(SourceUnreachable, match="address not allowed"):
        connector(notion).check()
    assert notion.requests == []
