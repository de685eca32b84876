"""Google Drive through the product: a source synced from a local stand-in of Drive and the
Directory API, then searched as the tenant's members, who find a file only while it is shared
with them (directly, through a Google group, or through the shared drive they are in)."""

import pytest

from knowledge.services.sync import source_sync
from tests.connectors.helpers import member, search_titles, visible_titles
from tests.connectors.samples import SAMPLES
from tests.factories import TenantFactory

pytestmark = pytest.mark.django_db

PUBLIC_TITLES = {"Onboarding guide", "expenses.md"}
ENGINEERING = {"Deploy runbook", "Quarterly revenue", "Offsite plan"}


@pytest.fixture(autouse=True)
def _loopback(settings):
    settings.KB_FETCH_ALLOWED_NETWORKS = ["127.0.0.1/32"]
    settings.KB_CONNECTOR_BACKOFF_S = 0


@pytest.fixture
def drive():
    """The gdrive sample (``tests/connectors/samples.py``)."""
    with SAMPLES["gdrive"].running() as standin:
        yield standin


@pytest.fixture
def tenant():
    return TenantFactory()


@pytest.fixture
def source(tenant, drive):
    return SAMPLES["gdrive"].source(tenant, drive)


def test_the_first_sync_brings_every_file_in_and_only_its_readers_find_a_restricted_one(tenant, source):
    alice = member(tenant, "alice@example.com")
    carol = member(tenant, "carol@example.com")
    dave = member(tenant, "dave@example.com")
    admin = member(tenant, "admin@example.com", role="admin")

    run = source_sync(source=source)

    assert run.status == "done", run.error
    assert run.counts()["new"] == 7
    assert visible_titles(tenant, alice) == PUBLIC_TITLES | ENGINEERING | {"Salary bands"}
    assert visible_titles(tenant, carol) == PUBLIC_TITLES | {"Board deck"}  # through the board group
    assert visible_titles(tenant, dave) == PUBLIC_TITLES | {"Board deck", "Offsite plan"}  # a nested group, a share
    assert "Salary bands" in search_titles(tenant, alice, "salary bands engineers level three")
    assert "Salary bands" not in search_titles(tenant, carol, "salary bands engineers level three")
    assert "Salary bands" in search_titles(tenant, admin, "salary bands engineers level three")
    assert "Board deck" in search_titles(tenant, carol, "Globex acquisition")
    assert "Onboarding guide" in search_titles(tenant, carol, "laptop on their first day")
    assert run.permissions["groups"] == 1


def test_an_incremental_sync_reads_only_what_changed(tenant, drive, source):
    for n in range(60):
        drive.add_file(f"note-{n}.md", f"Weekly status note number {n}.", mime="text/markdown", anyone=True)
    assert source_sync(source=source).status == "done"
    bob = member(tenant, "bob@example.com")
    drive.edit(drive.ids["Deploy runbook"], "# Deploys\nThe deploy freeze now starts on Thursday.")
    drive.add_file("Hiring plan", "We hire two designers in June.", drive=drive.ids["Engineering"])
    drive.reset_counts()

    run = source_sync(source=source)

    assert run.status == "done", run.error
    assert (run.counts()["new"], run.counts()["updated"]) == (1, 1)
    assert sum(1 for _method, path in drive.requests if path.endswith("/export")) == 2  # only the two files are read
    assert drive.count("/drive/v3/changes") == 1
    assert drive.count("/drive/v3/files") <= 8  # changes' files, the listing, one walk for the permissions
    assert "Hiring plan" in search_titles(tenant, bob, "hire two designers")
    assert "Deploy runbook" in search_titles(tenant, bob, "freeze starts on Thursday")


def test_a_file_deleted_in_drive_leaves_search(tenant, drive, source):
    bob = member(tenant, "bob@example.com")
    assert source_sync(source=source).status == "done"
    assert "Deploy runbook" in search_titles(tenant, bob, "deploy freeze payment service")
    drive.trash(drive.ids["Deploy runbook"])
    drive.delete(drive.ids["Quarterly revenue"])

    run = source_sync(source=source)

    assert run.status == "done", run.error
    assert run.counts()["deleted"] == 2
    assert "Deploy runbook" not in search_titles(tenant, bob, "deploy freeze payment service")
    assert visible_titles(tenant, bob) == PUBLIC_TITLES | {"Offsite plan"}


def test_a_reader_a_file_is_unshared_from_no_longer_finds_it(tenant, drive, source):
    alice = member(tenant, "alice@example.com")
    owner = member(tenant, "owner@example.com")
    assert source_sync(source=source).status == "done"
    assert "Salary bands" in search_titles(tenant, alice, "salary bands engineers level three")
    drive.unshare(drive.ids["Salary bands"], "alice@example.com")
    drive.reset_counts()

    run = source_sync(source=source, scope="permissions")

    assert run.status == "done", run.error
    assert "Salary bands" not in search_titles(tenant, alice, "salary bands engineers level three")
    assert "Salary bands" not in visible_titles(tenant, alice)
    assert "Salary bands" in visible_titles(tenant, owner)
    assert sum(1 for _method, path in drive.requests if path.endswith("/export")) == 0  # no content read


def test_a_member_who_leaves_a_google_group_no_longer_finds_its_files(tenant, drive, source):
    carol = member(tenant, "carol@example.com")
    dave = member(tenant, "dave@example.com")
    assert source_sync(source=source).status == "done"
    assert "Board deck" in visible_titles(tenant, carol)
    drive.add_group("board@example.com", [], groups=["execs@example.com"])

    run = source_sync(source=source, scope="permissions")

    assert run.status == "done", run.error
    assert "Board deck" not in visible_titles(tenant, carol)
    assert "Board deck" in visible_titles(tenant, dave)
