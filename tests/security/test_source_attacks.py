"""Sources that try to cross the tenant boundary, sent as a tenant admin would: through the REST API.

Each attack (``ATTACKS``) is tried twice. With every guard on, it is refused: a 4xx with a clear
code, or a failed run that says why; nothing of what it aimed at is stored in the attacker's
tenant; and the test servers it aimed at count no connection at all. With its own guard
switched off (``GUARDS``: the folder grants, the link check, the address check, the operator's
limits), the same attack gets through, which shows each test can fail.

The world: tenant ``acme`` (the attacker, an admin with an API token) and tenant ``bolt`` (the
victim), whose uploaded board minutes lie in the data directory's ``uploads/`` and whose private
repository lies in the git cache, as the product leaves them; loopback web and git servers that
count their connections; ``acme``'s granted share holding a link to ``/etc/passwd``.
"""

from __future__ import annotations

import io
import shutil
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from django.conf import settings as django_settings
from dulwich import porcelain

from core import outbound
from core.models import Membership
from knowledge import folder_grants
from knowledge.connectors import folder as folder_connector
from knowledge.connectors import git as git_connector
from knowledge.folder_grants import folder_grant_remove, path_real
from knowledge.models import Source
from knowledge.services import sources as source_services
from tests.factories import MembershipFactory, folder_granted
from tests.knowledge.web_site import Response, WebSite, page
from tests.security.probe_table import probe_record
from tests.security.source_world import (
    MINUTES,
    PRIVATE,
    Outcome,
    Tree,
    attacker_and_victim,
    attacker_sync,
    dumb_http_pages,
    leaked_into,
    run_message,
)

ROOT = Path(__file__).resolve().parents[2]
INTRANET = "intranetpagemarker: the VPN password rotates on Mondays."
PASSWD = "root:x:0:0"


@dataclass
class World:
    """The attacker's API client and tenant, the victim's files, and the servers."""

    client: object
    acme: object
    bolt: object
    data: Path
    share: Path
    uploads: Path
    bolt_cache: Path
    web: WebSite
    git_site: WebSite
    victim: WebSite
    settings: object = None  # pytest-django's settings fixture (restored after each test)
    servers: list = field(default_factory=list)

    def connections(self) -> int:
        return sum(server.connections for server in self.servers)


@pytest.fixture
def world(db, settings, tmp_path):
    settings.KB_FETCH_ALLOWED_NETWORKS = []
    tenants = attacker_and_victim(settings, tmp_path)

    # acme's granted share: a note and a link to the server's /etc/passwd.
    share = tmp_path / "acme-share"
    share.mkdir()
    (share / "welcome.md").write_text("# Welcome\n\nThe share of the acme team.\n")
    (share / "passwd.txt").symlink_to("/etc/passwd")
    folder_granted(tenants.acme, share)

    # Loopback servers: an intranet page, a dumb-HTTP git repository, a victim on 127.0.0.2.
    intranet = Tree(tmp_path / "intranet-repo", {"secret.md": f"# Secret\n\n{INTRANET}\n"})
    bare = tmp_path / "intranet.git"
    porcelain.clone(str(intranet.path), str(bare), bare=True, errstream=io.BytesIO()).close()
    web = WebSite({"/": page("Intranet", INTRANET), "/robots.txt": Response(404, "")}).start()
    git_site = WebSite(dumb_http_pages(bare)).start()
    victim = WebSite({**dumb_http_pages(bare), "/": page("Victim", INTRANET)}, host="127.0.0.2").start()
    built = World(
        tenants.client,
        tenants.acme,
        tenants.bolt,
        settings.KB_DATA_DIR,
        share,
        tenants.uploads,
        tenants.bolt_cache,
        web,
        git_site,
        victim,
    )
    built.servers = [web, git_site, victim]
    built.settings = settings
    yield built
    for server in built.servers:
        server.close()


# --- Outcomes ---------------------------------------------------------------------------------------


def _attack(world: World, body: dict, marker: str | None = None, *, sync: bool = True) -> Outcome:
    """POST ``body`` as a new source; if it is accepted, sync it (runs at once without a broker)."""
    body = {"name": "attack", "crawl_delay_s": 0.5, **body}
    response = world.client.post("/api/v1/sources/", body, format="json")
    outcome = Outcome(response.status_code)
    if response.status_code >= 400:
        error = response.json()["error"]
        outcome.code, outcome.message = error["code"], error["message"]
    elif sync:
        outcome.run = attacker_sync(world, response.json()["id"])
        outcome.message = run_message(outcome.run)
    outcome.leaked = bool(marker) and leaked_into(world.acme, marker)
    outcome.connections = world.connections()
    return outcome


# --- The attacks --------------------------------------------------------------------------------------


def folder_at_the_data_dirs_uploads(w):
    return _attack(w, {"kind": "folder", "location": str(w.uploads)}, MINUTES)


def git_at_another_tenants_git_cache(w):
    return _attack(w, {"kind": "git", "location": str(w.bolt_cache)}, PRIVATE)


def folder_at_etc(w):
    return _attack(w, {"kind": "folder", "location": "/etc", "include": ["*.txt", "*.md"]}, sync=False)


def folder_with_a_link_to_etc_passwd(w):
    return _attack(w, {"kind": "folder", "location": str(w.share)}, PASSWD)


def git_at_the_servers_checkout(w):
    return _attack(w, {"kind": "git", "location": str(ROOT), "include": ["README.md"]}, "Knowledge base")


def git_file_url_of_the_servers_checkout(w):
    return _attack(w, {"kind": "git", "location": f"file://{ROOT}", "include": ["README.md"]}, "Knowledge base")


def web_at_a_loopback_address(w):
    return _attack(w, {"kind": "web", "location": w.web.url("/")}, INTRANET)


def web_at_localhost(w):
    return _attack(w, {"kind": "web", "location": f"http://localhost:{w.web.port}/"}, INTRANET)


def git_over_dumb_http_at_a_loopback_address(w):
    return _attack(w, {"kind": "git", "location": w.git_site.url("/repo.git")}, INTRANET)


def web_at_the_cloud_metadata_address(w):
    return _attack(w, {"kind": "web", "location": "http://169.254.169.254/latest/meta-data/"}, sync=False)


def web_as_a_port_scanner(w):
    """An open and a closed loopback port must read the same: refused alike, or (guard off) told apart."""
    closed = _attack(w, {"kind": "web", "location": "http://127.0.0.1:1/", "name": "closed"})
    opened = _attack(w, {"kind": "web", "location": w.web.url("/"), "name": "open"}, INTRANET)
    told_apart = (closed.status, closed.code, closed.run and closed.run.status) != (
        opened.status,
        opened.code,
        opened.run and opened.run.status,
    )
    refused = closed.status == opened.status == 400 and "refused" not in (closed.message + opened.message).lower()
    return Outcome(400 if refused else 201, closed.code, closed.message, leaked=told_apart, connections=w.connections())


ODD_SPELLINGS = [
    "2130706433",
    "127.1",
    "0x7f.0.0.1",
    "017700000001",
    "0.0.0.0",
    "[::ffff:127.0.0.1]",
    "[::ffff:7f00:1]",
]


def web_at_odd_spellings_of_loopback(w):
    """Every spelling is refused (guard on); with the guard off, they reach the loopback server."""
    outcomes = [
        _attack(w, {"kind": "web", "location": f"http://{host}:{w.web.port}/", "name": f"odd-{i}"}, INTRANET)
        for i, host in enumerate(ODD_SPELLINGS)
    ]
    refused = all(o.status == 400 and o.code == "address_not_allowed" for o in outcomes)
    return Outcome(
        400 if refused else 201,
        "address_not_allowed" if refused else "",
        "refused alike: " + ", ".join(ODD_SPELLINGS) if refused else "",
        leaked=any(o.leaked for o in outcomes),
        connections=w.connections(),
    )


def page_limit_of_two_billion(w):
    return _attack(w, {"kind": "web", "location": "https://example.org/", "page_limit": 2147483647}, sync=False)


def crawl_delay_of_zero(w):
    return _attack(w, {"kind": "web", "location": "https://example.org/", "crawl_delay_s": 0}, sync=False)


def sync_every_minute(w):
    return _attack(w, {"kind": "web", "location": "https://example.org/", "sync_every": "1m"}, sync=False)


def web_location_changed_in_the_database_to_loopback(w):
    """Saved while public, then moved to loopback behind the API's back: the sync still refuses it."""
    source = Source.objects.create(tenant=w.acme, name="moved", kind="web", location=w.web.url("/"), crawl_delay_s=0.5)
    run = attacker_sync(w, source.pk)
    return Outcome(201, run=run, message=run.error, leaked=leaked_into(w.acme, INTRANET), connections=w.connections())


def folder_whose_grant_was_revoked(w):
    """Created inside a grant, synced after the operator revoked it: the sync reads nothing."""
    response = w.client.post("/api/v1/sources/", {"name": "share", "kind": "folder", "location": str(w.share)})
    assert response.status_code == 201, response.content
    folder_grant_remove(tenant=w.acme, path=w.share)
    run = attacker_sync(w, response.json()["id"])
    return Outcome(201, run=run, message=run.error, leaked=leaked_into(w.acme, "The share of the acme team"))


def git_redirected_to_a_refused_address(w):
    """An allowed git server (127.0.0.1, opened by the operator) redirects to 127.0.0.2, which is not."""
    w.settings.KB_FETCH_ALLOWED_NETWORKS = ["127.0.0.1/32"]
    for path in list(w.git_site.pages):
        w.git_site.pages[path] = Response(302, "", {"Location": w.victim.url(path)})
    outcome = _attack(w, {"kind": "git", "location": w.git_site.url("/repo.git")}, INTRANET)
    outcome.connections = w.victim.connections
    return outcome


@dataclass(frozen=True)
class Attack:
    run: Callable[[World], Outcome]
    guard: str  # the GUARDS entry whose absence lets it through
    code: str = ""  # the 4xx code when refused at create; "" when it is the run that refuses


ATTACKS = [
    Attack(folder_at_the_data_dirs_uploads, "grants", "location_not_allowed"),
    Attack(git_at_another_tenants_git_cache, "grants", "location_not_allowed"),
    Attack(folder_at_etc, "grants", "location_not_allowed"),
    Attack(folder_with_a_link_to_etc_passwd, "links"),
    Attack(git_at_the_servers_checkout, "grants", "location_not_allowed"),
    Attack(git_file_url_of_the_servers_checkout, "grants", "location_not_allowed"),
    Attack(web_at_a_loopback_address, "addresses", "address_not_allowed"),
    Attack(web_at_localhost, "addresses", "address_not_allowed"),
    Attack(git_over_dumb_http_at_a_loopback_address, "addresses", "address_not_allowed"),
    Attack(web_at_the_cloud_metadata_address, "addresses", "address_not_allowed"),
    Attack(web_as_a_port_scanner, "addresses"),
    Attack(web_at_odd_spellings_of_loopback, "addresses"),
    Attack(page_limit_of_two_billion, "limits", "invalid_page_limit"),
    Attack(crawl_delay_of_zero, "limits", "invalid_crawl_delay"),
    Attack(sync_every_minute, "limits", "invalid_sync_every"),
    Attack(web_location_changed_in_the_database_to_loopback, "addresses"),
    Attack(folder_whose_grant_was_revoked, "grants"),
    Attack(git_redirected_to_a_refused_address, "addresses"),
]
IDS = [attack.run.__name__ for attack in ATTACKS]


# --- The guards, and switching each off ---------------------------------------------------------------


def _grants_off(monkeypatch):
    def anywhere(*, tenant, location):
        return path_real(location)

    for module in (source_services, folder_connector, git_connector):
        monkeypatch.setattr(module, "folder_location_check", anywhere)
    monkeypatch.setattr(folder_grants, "path_in_data_dir", lambda path: False)  # files in the data dir too


def _links_off(monkeypatch):
    monkeypatch.setattr(folder_connector, "path_inside", lambda path, root: True)
    monkeypatch.setattr(folder_connector.FolderConnector, "_bytes", lambda self, file, max_bytes: file.read_bytes())


def _addresses_off(monkeypatch):
    monkeypatch.setattr(outbound, "address_allowed", lambda address: True)


def _limits_off(monkeypatch):
    monkeypatch.setattr(django_settings, "KB_WEB_MAX_PAGES", 2**31, raising=False)
    monkeypatch.setattr(django_settings, "KB_WEB_MIN_CRAWL_DELAY_S", 0, raising=False)
    monkeypatch.setattr(django_settings, "KB_MIN_SYNC_EVERY_S", 60, raising=False)


GUARDS = {"grants": _grants_off, "links": _links_off, "addresses": _addresses_off, "limits": _limits_off}


# --- The tests ----------------------------------------------------------------------------------------


def _recorded(attack: Attack, outcome: Outcome, guard: str) -> Outcome:
    if outcome.status >= 400:
        what = f"{outcome.status} {outcome.code}"
    elif outcome.run is not None:
        what = f"{outcome.status}, run {outcome.run.status}"
    else:
        what = f"{outcome.status} accepted"
    probe_record(
        attack=attack.run.__name__.replace("_", " "),
        guard=guard,
        outcome=what + (", LEAKED" if outcome.leaked else ""),
        detail=outcome.message,
        connections=outcome.connections,
    )
    return outcome


@pytest.mark.parametrize("attack", ATTACKS, ids=IDS)
def test_every_attack_is_refused_stores_nothing_and_reaches_no_refused_address(world, attack):
    outcome = _recorded(attack, attack.run(world), "on")

    assert outcome.refused, (outcome.status, outcome.message)
    assert not outcome.leaked, outcome.message
    assert outcome.connections == 0
    if attack.code:
        assert (outcome.status, outcome.code) == (400, attack.code), outcome.message
        assert outcome.message
    elif outcome.run is not None:
        assert outcome.message, "a refusing run says why"
    for words in ("Connection refused", "Errno", "Traceback", "timed out", "No route"):
        assert words not in outcome.message


@pytest.mark.parametrize("attack", ATTACKS, ids=IDS)
def test_every_attack_gets_through_when_its_guard_is_switched_off(world, attack, monkeypatch):
    GUARDS[attack.guard](monkeypatch)

    outcome = _recorded(attack, attack.run(world), f"{attack.guard} off")

    got_through = outcome.leaked or outcome.connections > 0 or (outcome.status < 400 and outcome.run is None)
    assert got_through, (outcome.status, outcome.code, outcome.message)


def test_a_refused_link_is_named_in_the_runs_errors_and_the_rest_of_the_folder_is_read(world):
    outcome = folder_with_a_link_to_etc_passwd(world)

    assert outcome.run.status == "done"
    assert outcome.run.errors == [
        {"document": "passwd.txt", "error": "passwd.txt: leads outside the granted folder (a link or ..); skipped."}
    ]
    assert leaked_into(world.acme, "The share of the acme team")


def test_a_sync_whose_grant_was_revoked_fails_saying_what_to_ask_the_operator(world):
    outcome = folder_whose_grant_was_revoked(world)

    assert outcome.run.status == "failed"
    assert "not inside a folder granted to this tenant" in outcome.run.error
    assert "manage.py folderroots" in outcome.run.error


def test_an_open_and_a_closed_loopback_port_answer_alike(world):
    closed = _attack(world, {"kind": "web", "location": "http://127.0.0.1:1/", "name": "closed"})
    opened = _attack(world, {"kind": "web", "location": world.web.url("/"), "name": "open"})

    assert (closed.status, closed.code) == (opened.status, opened.code) == (400, "address_not_allowed")
    assert closed.message.replace(":1/", ":PORT/") == opened.message.replace(f":{world.web.port}/", ":PORT/")


def test_the_operator_opens_an_intranet_range_and_only_that_range(world, settings):
    settings.KB_FETCH_ALLOWED_NETWORKS = ["127.0.0.1/32"]

    allowed = _attack(world, {"kind": "web", "location": world.web.url("/"), "name": "intranet"}, INTRANET)
    other = _attack(world, {"kind": "web", "location": world.victim.url("/"), "name": "victim"})

    assert allowed.run.status == "done" and allowed.leaked
    assert (other.status, other.code) == (400, "address_not_allowed")
    assert world.victim.connections == 0


def test_the_data_directory_can_never_be_granted_even_by_the_operator(world):
    from django.core.management import CommandError, call_command

    for folder in (world.data, world.uploads, world.data.parent):
        with pytest.raises(CommandError, match="data directory"):
            call_command("folderroots", "acme", "--add", str(folder), stdout=io.StringIO())


def test_a_tenant_admin_cannot_grant_a_folder_through_the_admin(world, client):
    from django.contrib.auth.models import Permission

    staff = MembershipFactory(tenant=world.acme, role=Membership.Role.ADMIN).user
    staff.is_staff = True
    staff.save()
    staff.user_permissions.set(Permission.objects.filter(content_type__app_label="knowledge"))
    client.force_login(staff)

    assert client.get("/admin/knowledge/foldergrant/").status_code == 403
    response = client.post("/admin/knowledge/foldergrant/add/", {"tenant": world.acme.pk, "path": "/etc"})
    assert response.status_code == 403
    assert list(world.acme.folder_grants.values_list("path", flat=True)) == [str(world.share.resolve())]


def test_the_operators_source_add_grants_the_folder_and_says_so(world, tmp_path):
    from django.core.management import call_command

    handbook = tmp_path / "handbook"
    handbook.mkdir()
    (handbook / "leave.md").write_text("# Leave\n\nAsk your manager two weeks ahead.\n")
    out = io.StringIO()

    call_command(
        "source",
        "add",
        "--tenant",
        "bolt",
        "--name",
        "handbook",
        "--kind",
        "folder",
        "--location",
        str(handbook),
        "--sync",
        stdout=out,
        stderr=io.StringIO(),
    )

    assert f"Granted {handbook.resolve()} to bolt" in out.getvalue()
    assert "1 new" in out.getvalue()


def test_a_repository_borrowing_another_tenants_objects_through_alternates_is_refused(world, tmp_path):
    borrower = Tree(world.share / "borrower", {"note.md": "# Note\n\nNothing here.\n"})
    alternates = borrower.path / ".git" / "objects" / "info" / "alternates"
    alternates.parent.mkdir(parents=True, exist_ok=True)
    alternates.write_text(f"{world.bolt_cache / 'objects'}\n")

    outcome = _attack(world, {"kind": "git", "location": str(borrower.path)})

    assert outcome.run.status == "failed" and "not inside a folder granted" in outcome.run.error


def test_a_git_fetch_larger_than_the_operators_limit_stops_and_keeps_nothing(world, settings, tmp_path):
    settings.KB_FETCH_ALLOWED_NETWORKS = ["127.0.0.1/32"]
    settings.KB_GIT_MAX_MB = 1
    big = Tree(tmp_path / "big", {"noise.txt": __import__("os").urandom(3 * 2**20).hex()})
    bare = tmp_path / "big.git"
    porcelain.clone(str(big.path), str(bare), bare=True, errstream=io.BytesIO()).close()
    world.git_site.pages.clear()
    world.git_site.pages.update(dumb_http_pages(bare))

    outcome = _attack(world, {"kind": "git", "location": world.git_site.url("/repo.git")})

    assert outcome.run.status == "failed" and "larger than 1 MB" in outcome.run.error
    source = Source.objects.get(tenant=world.acme, name="attack")
    cache = git_connector.cache_folder(source)
    assert not any(p.suffix == ".pack" for p in cache.rglob("*"))
    shutil.rmtree(cache, ignore_errors=True)
