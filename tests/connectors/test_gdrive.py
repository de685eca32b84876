"""The Google Drive connector against a local stand-in of Drive v3, Google's token endpoint and the
Directory API, through the real google-api-python-client and google-auth."""

import pytest

from knowledge.connectors.base import PUBLIC, CredentialRejected, Permission, SourceUnreachable
from knowledge.connectors.services import gdrive, service_connector
from tests.connectors.standins.gdrive import DriveStandIn, company
from tests.factories import SourceFactory, TenantFactory

pytestmark = pytest.mark.django_db

OWNER, ALICE, BOB, DAVE = "owner@example.com", "alice@example.com", "bob@example.com", "dave@example.com"
READABLE = {
    "Onboarding guide",
    "Salary bands",
    "expenses.md",
    "Board deck",
    "Deploy runbook",
    "Quarterly revenue",
    "Offsite plan",
}


@pytest.fixture(autouse=True)
def _loopback(settings):
    settings.KB_FETCH_ALLOWED_NETWORKS = ["127.0.0.1/32"]
    settings.KB_CONNECTOR_BACKOFF_S = 0


@pytest.fixture
def drive():
    with DriveStandIn() as standin:
        standin.ids = company(standin)
        yield standin


def connector(standin, **options):
    options = {"subject": "admin@example.com", "directory": True, **options}
    source = SourceFactory(
        tenant=TenantFactory(), kind="gdrive", location=standin.url, secret=standin.secret, options=options
    )
    return service_connector(source)


def by_title(items):
    return {item.documents[0].title: item for item in items if item.documents}


def test_the_first_pass_reads_every_readable_file_with_its_text_link_place_and_readers(drive):
    items = list(connector(drive).changes({}))
    found = by_title(items)

    assert set(found) == READABLE  # the folder and logo.png are not read
    runbook = found["Deploy runbook"].documents[0]
    assert "Deploy freeze starts Friday" in runbook.text
    assert runbook.uri == f"https://docs.google.com/document/d/{drive.ids['Deploy runbook']}/edit"
    assert runbook.external_id == f"gdrive/{drive.ids['Deploy runbook']}"
    assert runbook.metadata["place"] == "Engineering"
    assert runbook.metadata["source_kind"] == "gdrive"
    assert runbook.published_at is not None
    assert found["Salary bands"].documents[0].metadata == {
        "author": "Owner",
        "place": "Handbook",
        "updated_at": drive.files[drive.ids["Salary bands"]]["modifiedTime"],
        "source_kind": "gdrive",
    }
    assert "APAC | 900" in found["Quarterly revenue"].documents[0].text  # a sheet, exported as .xlsx
    assert "approved the Globex acquisition" in found["Board deck"].documents[0].text  # slides, as .pptx
    assert "reimbursed within 30 days" in found["expenses.md"].documents[0].text  # downloaded as it is
    assert found["Board deck"].documents[0].metadata["place"] == "My Drive"
    assert found["Onboarding guide"].permission == PUBLIC  # shared with the organisation's domain
    assert found["expenses.md"].permission == PUBLIC  # anyone with the link
    assert found["Salary bands"].permission == Permission.of(emails=[OWNER, ALICE])
    assert found["Board deck"].permission == Permission.of(emails=[OWNER], groups=["board@example.com"])
    assert found["Deploy runbook"].permission == Permission.of(emails=[ALICE, BOB])  # the shared drive's members
    assert found["Offsite plan"].permission == Permission.of(emails=[ALICE, BOB, DAVE])  # and one more
    assert items[-1].checkpoint == {"page_token": str(len(drive.log) + 1)}
    assert {grant["scope"] for grant in drive.grants} == {gdrive.DRIVE_SCOPE}
    assert {grant["sub"] for grant in drive.grants} == {"admin@example.com"}


def test_an_incremental_pass_returns_the_edited_and_the_new_file_with_requests_that_do_not_grow_with_files(drive):
    for n in range(40):
        drive.add_file(f"note-{n}.md", f"Weekly note number {n}.", mime="text/markdown", parent=drive.ids["Handbook"])
    checkpoint = list(connector(drive).changes({}))[-1].checkpoint
    drive.edit(drive.ids["Deploy runbook"], "# Deploys\nThe deploy freeze now starts Thursday.")
    new = drive.add_file("Hiring plan", "We hire two designers in June.", drive=drive.ids["Engineering"])
    drive.reset_counts()

    items = list(connector(drive).changes(checkpoint))

    assert [item.key for item in items] == [drive.ids["Deploy runbook"], new]
    assert "now starts Thursday" in items[0].documents[0].text
    assert items[0].fingerprint != ""
    assert items[-1].checkpoint == {"page_token": str(len(drive.log) + 1)}
    assert drive.count("/drive/v3/changes") == 1
    assert sum(1 for _method, path in drive.requests if path.endswith("/export")) == 2
    assert len(drive.requests) <= 7  # token, changes, folders, drives, the drive's members, 2 exports


def test_a_full_pass_follows_pages_and_resumes_from_the_page_it_stopped_in(drive, monkeypatch):
    monkeypatch.setattr(gdrive, "PAGE_SIZE", 2)
    items = list(connector(drive).changes({}))
    assert {item.documents[0].title for item in items} == READABLE
    assert drive.count("/drive/v3/files") >= 5  # pages of two

    stopped = items[2].checkpoint
    resumed = list(connector(drive).changes(stopped))

    assert stopped["files_page"] is not None and "page_token" not in stopped
    assert {item.key for item in items[3:]} <= {item.key for item in resumed} < {item.key for item in items}
    assert resumed[-1].checkpoint == {"page_token": stopped["start_page_token"]}


def test_changes_follow_pages_and_the_last_item_carries_the_next_start_token(drive, monkeypatch):
    monkeypatch.setattr(gdrive, "PAGE_SIZE", 2)
    checkpoint = list(connector(drive).changes({}))[-1].checkpoint
    for title in ("Deploy runbook", "Salary bands", "Offsite plan"):
        drive.edit(drive.ids[title], f"{title}: rewritten.")
    drive.reset_counts()

    items = list(connector(drive).changes(checkpoint))

    assert [item.key for item in items] == [drive.ids[t] for t in ("Deploy runbook", "Salary bands", "Offsite plan")]
    assert drive.count("/drive/v3/changes") == 2
    assert items[0].checkpoint == checkpoint
    assert items[-1].checkpoint == {"page_token": str(len(drive.log) + 1)}


def test_trashed_and_deleted_files_come_as_deletions_and_leave_the_listing(drive):
    drive_connector = connector(drive)
    checkpoint = list(drive_connector.changes({}))[-1].checkpoint
    assert drive.ids["Salary bands"] in dict(drive_connector.listing())
    drive.trash(drive.ids["Salary bands"])
    drive.delete(drive.ids["Offsite plan"])

    items = list(connector(drive).changes(checkpoint))
    listed = dict(connector(drive).listing())

    assert [(item.key, item.deleted) for item in items] == [
        (drive.ids["Salary bands"], True),
        (drive.ids["Offsite plan"], True),
    ]
    assert drive.ids["Salary bands"] not in listed and drive.ids["Offsite plan"] not in listed
    assert len(listed) == len(READABLE) - 2
    assert listed[drive.ids["Deploy runbook"]] == "v1"
    assert [item.deleted for item in connector(drive).fetch([drive.ids["Offsite plan"]])] == [True]


def test_unsharing_a_file_takes_the_reader_out_of_its_permission(drive):
    salary = drive.ids["Salary bands"]
    assert dict(connector(drive).permissions([salary]))[salary] == Permission.of(emails=[OWNER, ALICE])
    drive.unshare(salary, ALICE)

    assert dict(connector(drive).permissions([salary]))[salary] == Permission.of(emails=[OWNER])


def test_many_keys_take_their_permissions_from_one_walk_of_the_listing(drive):
    for n in range(60):
        drive.add_file(f"memo-{n}.md", f"Memo {n}.", mime="text/markdown", readers=[BOB])
    keys = [key for key, _fingerprint in connector(drive).listing()]
    drive.reset_counts()

    found = dict(connector(drive).permissions(keys))

    assert set(found) == set(keys) and len(keys) == len(READABLE) + 60
    assert found[drive.ids["Offsite plan"]] == Permission.of(emails=[ALICE, BOB, DAVE])
    assert drive.count("/drive/v3/files") <= 5  # listing, folders, the two shared drive reads


def test_a_shared_drive_folder_shared_beyond_the_drive_lets_its_files_readers_in(drive):
    partners = drive.add_folder("Partners", drive=drive.ids["Engineering"], readers=["erin@example.com"])
    contract = drive.add_file("Partner contract", "Terms with Initech.", parent=partners)

    assert dict(connector(drive).permissions([contract]))[contract] == Permission.of(
        emails=[ALICE, BOB, "erin@example.com"]
    )


def test_a_limited_access_folder_keeps_out_drive_members_who_are_not_organizers(drive):
    leadership = drive.add_folder("Leadership", drive=drive.ids["Engineering"], readers=[DAVE], limited=True)
    reorg = drive.add_file("Reorg plan", "Two teams merge in May.", parent=leadership)
    inside = drive.add_folder("Drafts", parent=leadership, readers=["erin@example.com"])
    draft = drive.add_file("Reorg draft", "An early draft.", parent=inside)

    found = dict(connector(drive).permissions([reorg, draft]))

    assert found[reorg] == Permission.of(emails=[ALICE, DAVE])  # Alice organizes the drive; Bob is a member
    assert found[draft] == Permission.of(emails=[ALICE, DAVE, "erin@example.com"])


def test_a_file_whose_sharing_the_account_cannot_see_has_no_permission(drive):
    hidden = drive.add_file("Private notes", "Nothing to see.", can_share=False)

    assert dict(connector(drive).permissions([hidden]))[hidden] is None
    assert by_title(connector(drive).changes({}))["Private notes"].permission is None


def test_groups_give_their_members_from_the_directory_nested_groups_included(drive):
    groups = list(connector(drive).groups())

    assert [(g.external_id, g.name, g.emails) for g in groups] == [
        ("board@example.com", "gdrive:group:board@example.com", frozenset({"carol@example.com", DAVE}))
    ]
    assert drive.count("/admin/directory/v1/groups/board%40example.com/members") == 1
    assert gdrive.MEMBERS_SCOPE in {grant["scope"] for grant in drive.grants}


def test_without_the_directory_a_group_is_known_by_its_own_address(drive):
    groups = list(connector(drive, directory=False).groups())

    assert [(g.name, g.emails) for g in groups] == [
        ("gdrive:group:board@example.com", frozenset({"board@example.com"}))
    ]
    assert drive.count("/admin/") == 0


def test_options_limit_the_source_to_chosen_drives_and_folders(drive):
    only_drive = {item.documents[0].title for item in connector(drive, drives=["Engineering"]).changes({})}
    only_folder = {key for key, _ in connector(drive, folders=[drive.ids["Handbook"]]).listing()}

    assert only_drive == {"Deploy runbook", "Quarterly revenue", "Offsite plan"}
    assert only_folder == {drive.ids[t] for t in ("Onboarding guide", "Salary bands", "expenses.md")}


def test_a_domain_that_is_not_the_organisations_is_not_public(drive):
    partner = drive.add_file("Partner brief", "Shared with a partner.", domain="partner.example.org")

    assert dict(connector(drive).permissions([partner]))[partner] == Permission.of(emails=[OWNER])


def test_a_rate_limited_request_waits_for_retry_after_and_succeeds(drive):
    drive_connector = connector(drive)
    drive.fail_next(429, retry_after=1)

    keys = dict(drive_connector.listing())

    assert len(keys) == len(READABLE)
    assert drive.requests[0] == drive.requests[1] == ("POST", "/token")  # the refused request, tried again


def test_server_errors_are_retried(drive):
    drive_connector = connector(drive)
    list(drive_connector.listing())
    drive.reset_counts()
    drive.fail_next(503, retry_after=None, count=2)

    assert len(dict(drive_connector.listing())) == len(READABLE)
    assert drive.count("/drive/v3/files") == 3


def test_a_revoked_key_raises_credential_rejected_with_a_clear_message(drive):
    drive.revoke()

    with pytest.raises(CredentialRejected, match="refused the service account's key .*valid key"):
        list(connector(drive).changes({}))


def test_a_directory_scope_the_delegation_lacks_fails_the_groups_clearly_and_not_the_files(drive):
    drive.refused_scopes = {gdrive.MEMBERS_SCOPE}
    drive_connector = connector(drive)

    assert len(list(drive_connector.changes({}))) == len(READABLE)
    with pytest.raises(CredentialRejected, match="may not delegate .*admin.directory.group.member.readonly"):
        list(drive_connector.groups())


def test_a_token_revoked_during_a_sync_raises_credential_rejected(drive):
    drive_connector = connector(drive)
    list(drive_connector.listing())
    drive.revoke()

    with pytest.raises(CredentialRejected, match="HTTP 401"):
        list(drive_connector.listing())


def test_a_key_that_is_not_a_service_account_file_is_refused_clearly(drive):
    source = SourceFactory(tenant=TenantFactory(), kind="gdrive", location=drive.url, secret="xoxb-not-json")

    with pytest.raises(CredentialRejected, match="not a Google service account's JSON key file"):
        service_connector(source)


def test_check_says_who_the_account_acts_as_and_what_it_sees(drive):
    assert connector(drive).check() == "Google Drive as admin@example.com: 1 shared drive, 7 readable files"


def test_a_location_at_a_private_address_is_refused_and_never_contacted(drive, settings):
    settings.KB_FETCH_ALLOWED_NETWORKS = []

    with pytest.raises(SourceUnreachable, match="address not allowed"):
        connector(drive).check()
    with pytest.raises(SourceUnreachable, match="address not allowed"):
        list(connector(drive).changes({}))
    assert drive.requests == []  # neither the token endpoint nor Drive itself
