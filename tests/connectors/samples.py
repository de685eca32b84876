"""The sample organisation each service's end-to-end sync tests read: a stand-in filled with a few
documents, people and groups, and the source that reads it, one ``Sample`` per kind (``SAMPLES``).

``test_<kind>_sync.py`` builds its stand-in and source from its sample; ``test_faults.py`` runs
the faults every service meets (a revoked credential, a 429 with ``Retry-After``) over all six.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from knowledge.services.sources import source_create
from tests.connectors.standin import StandIn
from tests.connectors.standins.confluence import ConfluenceStandIn
from tests.connectors.standins.gdrive import DriveStandIn, company
from tests.connectors.standins.github import GitHubStandIn
from tests.connectors.standins.jira import JiraStandIn
from tests.connectors.standins.notion import NotionStandIn, paragraph
from tests.connectors.standins.slack import SlackStandIn


def slack_team(standin: SlackStandIn) -> None:
    """#general (public, with a thread) and #secret-plans (private: Alice and Bob)."""
    standin.add_user("U1", "Alice Archer", "alice@example.com")
    standin.add_user("U2", "Bob Baker", "bob@example.com")
    standin.add_user("U3", "Carol Chen", "carol@example.com")
    standin.add_channel("C1", "general", members=["U1", "U2", "U3"])
    standin.add_channel("C2", "secret-plans", private=True, members=["U1", "U2"])
    standin.freeze = standin.post("C1", "U1", "Deploy freeze starts Friday for the payment service.")
    standin.post("C1", "U2", "Hotfixes still need a review during the freeze.", thread=standin.freeze)
    standin.lunch = standin.post("C1", "U3", "Team lunch on Thursday at the canteen.")
    standin.plans = standin.post("C2", "U1", "We plan to acquire Globex in spring, the board agreed.")


def drive_company(standin: DriveStandIn) -> None:
    """A small company's Drive (``standins.gdrive.company``); ``standin.ids`` holds the ids by name."""
    standin.ids = company(standin)


def confluence_spaces(standin: ConfluenceStandIn) -> None:
    """ENG (the engineering group: Alice, Bob) with a deploy guide (a comment, a runbook) and a
    roadmap restricted to Alice; COMPANY (confluence-users: everyone) with a holiday calendar; HR
    (Carol alone) with the salary bands."""
    standin.user("a1", "Alice Archer", "alice@example.com")
    standin.user("b1", "Bob Baker", "bob@example.com")
    standin.user("c1", "Carol Chen", "carol@example.com")
    standin.group("g-eng", "engineering", ["a1", "b1"])
    standin.group("g-all", "confluence-users", ["a1", "b1", "c1"])
    standin.space("ENG", "Engineering", groups=["g-eng"])
    standin.space("COMPANY", "Company", groups=["g-all"])
    standin.space("HR", "Human Resources", users=["c1"])
    standin.deploy = standin.page(
        "ENG", "Deploy guide", "<p>Deploy the payment service with the blue-green switch.</p>"
    )
    standin.comment(standin.deploy, "<p>Check the canary dashboards before switching.</p>", by="b1")
    standin.attachment(
        standin.deploy, "runbook.md", b"# Runbook\n\nPage the storage team on disk alerts.", "text/markdown"
    )
    standin.roadmap = standin.page("ENG", "Secret roadmap", "<p>We enter the Mars market with reusable rockets.</p>")
    standin.restrict(standin.roadmap, users=["a1"])
    standin.holidays = standin.page(
        "COMPANY", "Holiday calendar", "<p>The office is closed on the winter holidays.</p>"
    )
    standin.salaries = standin.page("HR", "Salary bands", "<p>Salary bands per engineering level.</p>")


def github_repositories(standin: GitHubStandIn) -> None:
    """acme/handbook (public) and acme/secret (private: Alice, and Bob, whose address only the
    source's ``emails`` option knows)."""
    standin.add_user("alice", "alice@example.com")
    standin.add_user("carol", "carol@example.com")
    standin.add_repo("acme/handbook", visibility="public", collaborators=["alice", "carol"])
    standin.add_repo("acme/secret", visibility="private", collaborators=["alice", "bob"])
    standin.onboarding = standin.add_issue("acme/handbook", "Onboarding checklist", "New hires get a laptop.")
    standin.comment("acme/handbook", standin.onboarding, "Add the VPN setup to the checklist.", author="carol")
    standin.typo = standin.add_issue("acme/handbook", "Fix typo in onboarding", "Small wording fix.", pull=True)
    standin.plans = standin.add_issue("acme/secret", "Acquisition of Globex", "The board agreed to buy Globex.")


def jira_projects(standin: JiraStandIn) -> None:
    """ENG (every Jira user browses it) and SEC (the Developers role, Alice, and the
    security-team group, Carol)."""
    standin.user("alice", "Alice Archer", "alice@example.com")
    standin.user("bob", "Bob Baker", "bob@example.com")
    standin.user("carol", "Carol Chen", "carol@example.com")
    standin.group("security-team", "carol")
    standin.project("ENG", "Engineering")
    standin.project("SEC", "Security", browse=[("projectRole", "10002"), ("group", "security-team")])
    standin.role("SEC", "10002", "Developers", users=["alice"])
    standin.issue("ENG", "Login page times out on slow networks", "Users on 3G see a timeout.", reporter="bob")
    standin.comment("ENG-1", "alice", "The proxy closes idle connections after 30 seconds.")
    standin.tick()
    standin.issue("ENG", "Upgrade the billing database", "Move the billing database to PostgreSQL 17.")
    standin.tick()
    standin.issue("SEC", "Rotate the signing keys", "The zeppelin vault keeps the signing keys.", reporter="carol")
    standin.tick(5)


def notion_workspace(standin: NotionStandIn) -> None:
    """A handbook, a salary page under it, and a Projects database with one row."""
    ada = standin.add_user("Ada Lovelace", "ada@example.com")
    standin.handbook = standin.add_page(
        "Team handbook", [paragraph("Every new engineer pairs with a buddy for two weeks.")], author=ada
    )
    standin.tick()
    standin.salaries = standin.add_page(
        "Salary bands", [paragraph("Engineering salary bands are reviewed every April.")], parent=standin.handbook
    )
    standin.tick()
    projects = standin.add_database("Projects")
    standin.apollo = standin.add_page(
        "Apollo launch", [paragraph("The launch window opens in March.")], database=projects
    )
    standin.tick()


@dataclass(frozen=True)
class Sample:
    """One service's sample: its stand-in class and ``fill``; ``fields(standin)``, the name,
    location, secret and options of the source reading it (``source_create``'s keywords);
    ``documents``, how many documents a first sync brings in; ``reader``, the address of a person
    who may read some of them but is not an admin; ``first_request``, the ``(method, path)`` a
    sync starts with."""

    kind: str
    standin_class: type[StandIn]
    fill: Callable[[StandIn], None]
    fields: Callable[[StandIn], dict]
    documents: int
    reader: str
    first_request: tuple[str, str]

    @contextmanager
    def running(self) -> Iterator[StandIn]:
        """The stand-in, serving on loopback and filled, until the block ends."""
        with self.standin_class() as standin:
            self.fill(standin)
            yield standin

    def source(self, tenant, standin: StandIn):
        """The ``Source`` of ``tenant`` that reads ``standin`` (not synced yet)."""
        return source_create(tenant=tenant, kind=self.kind, **self.fields(standin))


def _plain(name: str) -> Callable[[StandIn], dict]:
    return lambda standin: {"name": name, "location": standin.url, "secret": standin.token}


def _drive_fields(drive: DriveStandIn) -> dict:
    options = {"subject": "admin@example.com", "directory": True}
    return {"name": "company-drive", "location": drive.url, "secret": drive.secret, "options": options}


def _confluence_fields(wiki: ConfluenceStandIn) -> dict:
    return {"name": "team-wiki", "location": wiki.site, "secret": wiki.token, "options": {"cloud": True}}


def _github_fields(github: GitHubStandIn) -> dict:
    options = {"repositories": ["acme/handbook", "acme/secret"], "emails": {"bob": "bob@example.com"}}
    return {"name": "team-github", "location": github.url, "secret": github.token, "options": options}


SAMPLES = {
    sample.kind: sample
    for sample in (
        Sample(
            kind="slack",
            standin_class=SlackStandIn,
            fill=slack_team,
            fields=_plain("team-slack"),
            documents=3,
            reader="alice@example.com",
            first_request=("POST", "/conversations.list"),
        ),
        Sample(
            kind="gdrive",
            standin_class=DriveStandIn,
            fill=drive_company,
            fields=_drive_fields,
            documents=7,
            reader="alice@example.com",
            first_request=("POST", "/token"),
        ),
        Sample(
            kind="confluence",
            standin_class=ConfluenceStandIn,
            fill=confluence_spaces,
            fields=_confluence_fields,
            documents=5,
            reader="alice@example.com",
            first_request=("GET", "/wiki/api/v2/spaces"),
        ),
        Sample(
            kind="github",
            standin_class=GitHubStandIn,
            fill=github_repositories,
            fields=_github_fields,
            documents=3,
            reader="alice@example.com",
            first_request=("GET", "/repos/acme/handbook"),
        ),
        Sample(
            kind="jira",
            standin_class=JiraStandIn,
            fill=jira_projects,
            fields=_plain("team-jira"),
            documents=3,
            reader="alice@example.com",
            first_request=("GET", "/rest/api/2/project"),
        ),
        Sample(
            kind="notion",
            standin_class=NotionStandIn,
            fill=notion_workspace,
            fields=_plain("team-notion"),
            documents=3,
            reader="carol@example.com",  # not a Notion user: Notion's pages are the whole tenant's
            first_request=("POST", "/v1/search"),
        ),
    )
}
