"""The connection check of folder, web and git sources (``FileConnector.check()``, through each
kind's ``reach()``) aimed past the tenant boundary: a tenant's web source at loopback, the cloud
metadata address or an internal name, a git remote at loopback (over HTTP, ``git://`` or ssh), and
a folder or local repository outside the operator's grants.

Each is refused by ``check()`` with the code a sync would give, before anything reaches the target:
the loopback servers count no connection, no socket connects anywhere (a watch on
``socket.socket.connect``), and no folder outside a grant is opened. The sources are written
straight to the database, as if saved while allowed and changed behind the API's back (the API
refuses them when they are saved: ``test_source_attacks``). Opening the guard (the operator's
``KB_FETCH_ALLOWED_NETWORKS``, a folder grant) lets the same check through, which shows each test
can fail. The API's test endpoint does not test file sources at all.
"""

from __future__ import annotations

import io
import socket
from pathlib import Path

import pytest
from dulwich import porcelain

from core.outbound import NOT_ALLOWED, AddressNotAllowed
from knowledge.connectors import folder as folder_connector
from knowledge.connectors.base import SourceUnreachable
from knowledge.connectors.folder import FolderConnector
from knowledge.connectors.git import GitConnector
from knowledge.connectors.web import WebConnector
from knowledge.models import Source
from tests.factories import folder_granted
from tests.knowledge.web_site import Response, WebSite, page
from tests.security.source_world import MINUTES, Tree, attacker_and_victim, dumb_http_pages

ROOT = Path(__file__).resolve().parents[2]
INTRANET = "intranetpagemarker: the VPN password rotates on Mondays."
# Internal names a tenant might aim at, resolved here as a company's DNS would resolve them.
INTERNAL_NAMES = {"wiki.corp.internal": "127.0.0.1", "metadata.google.internal": "169.254.169.254"}


@pytest.fixture
def world(db, settings, tmp_path):
    """Tenants ``acme`` (the attacker) and ``bolt`` (the victim, with its upload and fetched
    repository on disk: ``source_world``); acme's granted share; a loopback intranet page and a
    dumb-HTTP git repository on loopback; no network opened by the operator."""
    settings.KB_FETCH_ALLOWED_NETWORKS = []
    tenants = attacker_and_victim(settings, tmp_path)
    tenants.share = folder_granted(tenants.acme, tmp_path / "acme-share")
    (tenants.share / "welcome.md").write_text("# Welcome\n\nThe share of the acme team.\n")
    (tenants.share / "etc").symlink_to("/etc")
    tenants.bolt_share = folder_granted(tenants.bolt, tmp_path / "bolt-share")
    (tenants.bolt_share / "minutes.md").write_text(f"# Minutes\n\n{MINUTES}\n")
    intranet = Tree(tmp_path / "intranet-repo", {"secret.md": f"# Secret\n\n{INTRANET}\n"})
    bare = tmp_path / "intranet.git"
    porcelain.clone(str(intranet.path), str(bare), bare=True, errstream=io.BytesIO()).close()
    tenants.web = WebSite({"/": page("Intranet", INTRANET), "/robots.txt": Response(404, "")}).start()
    tenants.git = WebSite(dumb_http_pages(bare)).start()
    yield tenants
    tenants.web.close()
    tenants.git.close()


@pytest.fixture
def internal_dns(monkeypatch):
    """``INTERNAL_NAMES`` resolve as a company's internal DNS would resolve them."""
    resolve = socket.getaddrinfo

    def getaddrinfo(host, *args, **kwargs):
        return resolve(INTERNAL_NAMES.get(host, host), *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)


@pytest.fixture
def connects(monkeypatch, internal_dns) -> list:
    """Every address a socket tries to connect to (none is let through)."""
    tried: list = []

    def connect(self, address):
        tried.append(address)
        raise ConnectionRefusedError("the test lets no connection through")

    monkeypatch.setattr(socket.socket, "connect", connect)
    monkeypatch.setattr(socket.socket, "connect_ex", connect)
    return tried


def source(world, kind: str, location: str) -> Source:
    """acme's source of ``kind`` at ``location``, written straight to the database."""
    return Source.objects.create(tenant=world.acme, name=f"{kind} check", kind=kind, location=location, crawl_delay_s=0)


def refused(connector) -> SourceUnreachable:
    with pytest.raises(SourceUnreachable) as caught:
        connector.check()
    for words in ("Connection refused", "Errno", "Traceback"):
        assert words not in caught.value.message
    return caught.value


# --- Web --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "host", ["127.0.0.1", "localhost", "127.1", "2130706433", "[::ffff:127.0.0.1]", "wiki.corp.internal"]
)
def test_checking_a_web_source_aimed_at_the_servers_loopback_reaches_nothing(world, internal_dns, host):
    web = source(world, "web", f"http://{host}:{world.web.port}/")

    error = refused(WebConnector(web, sleep=lambda s: None))

    assert NOT_ALLOWED in error.message  # the same words for an open or a closed port
    assert world.web.connections == 0


@pytest.mark.parametrize(
    "location",
    [
        "http://169.254.169.254/latest/meta-data/iam/security-credentials/",
        "http://metadata.google.internal/computeMetadata/v1/",
        "http://[fd00:ec2::254]/latest/meta-data/",
        "http://10.0.0.1/",
        "http://192.168.1.1/admin/",
        "http://0.0.0.0:8000/",
    ],
)
def test_checking_a_web_source_aimed_at_the_metadata_address_or_an_intranet_connects_nowhere(world, connects, location):
    error = refused(WebConnector(source(world, "web", location), sleep=lambda s: None))

    assert NOT_ALLOWED in error.message
    assert connects == []


def test_the_operator_opening_the_metadata_range_lets_the_check_try_it(world, settings, connects):
    """The watch sees a connection the guard lets through: the test above could fail."""
    settings.KB_FETCH_ALLOWED_NETWORKS = ["169.254.0.0/16"]

    with pytest.raises(SourceUnreachable):
        WebConnector(source(world, "web", "http://metadata.google.internal/"), sleep=lambda s: None).check()

    assert [address[0] for address in connects] == ["169.254.169.254"]


def test_the_operator_opening_loopback_lets_the_same_web_check_through(world, settings):
    settings.KB_FETCH_ALLOWED_NETWORKS = ["127.0.0.1/32"]

    line = WebConnector(source(world, "web", world.web.url("/")), sleep=lambda s: None).check()

    assert line.startswith(f"{world.web.url('/')} answered 200")
    assert world.web.connections > 0


def test_a_web_check_redirected_to_a_refused_address_stops_at_the_redirect(world, settings):
    """Loopback 127.0.0.1 is opened by the operator; its page redirects to 127.0.0.2, which is not."""
    settings.KB_FETCH_ALLOWED_NETWORKS = ["127.0.0.1/32"]
    with WebSite({"/": page("Victim", INTRANET), "/robots.txt": Response(404, "")}, host="127.0.0.2") as victim:
        world.web.pages["/"] = Response(302, "", {"Location": victim.url("/")})

        with pytest.raises(SourceUnreachable):
            WebConnector(source(world, "web", world.web.url("/")), sleep=lambda s: None).check()

        assert world.web.connections > 0 and victim.connections == 0


# --- Git --------------------------------------------------------------------------------------


@pytest.mark.parametrize("host", ["127.0.0.1", "localhost", "wiki.corp.internal"])
def test_checking_a_git_remote_at_a_loopback_address_reaches_nothing(world, internal_dns, host):
    git = source(world, "git", f"http://{host}:{world.git.port}/repo.git")

    error = refused(GitConnector(git))

    assert error.code == AddressNotAllowed.code
    assert world.git.connections == 0


@pytest.mark.parametrize(
    "location", ["git://127.0.0.1/repo.git", "git@127.0.0.1:repo.git", "ssh://git@169.254.169.254/repo.git"]
)
def test_checking_a_git_remote_of_another_scheme_at_an_internal_address_connects_nowhere(world, connects, location):
    error = refused(GitConnector(source(world, "git", location)))

    assert error.code in ("invalid_location", AddressNotAllowed.code)
    assert connects == []


def test_the_operator_opening_loopback_lets_the_same_git_check_through(world, settings):
    settings.KB_FETCH_ALLOWED_NETWORKS = ["127.0.0.1/32"]

    line = GitConnector(source(world, "git", world.git.url("/repo.git"))).check()

    assert "at " in line and world.git.connections > 0


@pytest.mark.parametrize("where", ["bolt's git cache", "the server's checkout", "the server's checkout as file://"])
def test_checking_a_local_repository_outside_the_grants_is_refused(world, where):
    location = {
        "bolt's git cache": str(world.bolt_cache),
        "the server's checkout": str(ROOT),
        "the server's checkout as file://": f"file://{ROOT}",
    }[where]

    error = refused(GitConnector(source(world, "git", location)))

    assert error.code == "location_not_allowed"
    assert "privaterepomarker" not in error.message and "Knowledge base" not in error.message


# --- Folder -----------------------------------------------------------------------------------


@pytest.fixture
def opened(monkeypatch) -> list:
    """The folders the folder connector opened (``folder_open``); a walk fails the test."""
    calls: list = []
    real = folder_connector.folder_open

    def recorded(*, tenant, path):
        calls.append(Path(path))
        return real(tenant=tenant, path=path)

    monkeypatch.setattr(folder_connector, "folder_open", recorded)
    monkeypatch.setattr(FolderConnector, "_files", lambda self: pytest.fail("a check walked the folder"))
    return calls


@pytest.mark.parametrize(
    "where",
    [
        "/etc",
        "the data directory's uploads",
        "bolt's granted folder",
        "a link in acme's share to /etc",
        "acme's share/..",
    ],
)
def test_checking_a_folder_outside_the_operators_grants_is_refused_and_opens_nothing(world, opened, where):
    location = {
        "/etc": "/etc",
        "the data directory's uploads": str(world.uploads),
        "bolt's granted folder": str(world.bolt_share),
        "a link in acme's share to /etc": str(world.share / "etc"),
        "acme's share/..": f"{world.share}/..",
    }[where]

    error = refused(FolderConnector(source(world, "folder", location)))

    assert error.code == "location_not_allowed"
    assert opened == []
    assert MINUTES not in error.message


def test_checking_acmes_own_granted_share_opens_it_and_walks_nothing(world, opened):
    line = FolderConnector(source(world, "folder", str(world.share))).check()

    assert line.startswith(f"{world.share}: a granted folder the workers can read")
    assert opened == [world.share.resolve()] or opened == [world.share]


def test_a_grant_revoked_after_saving_is_refused_at_the_check(world, opened):
    from knowledge.folder_grants import folder_grant_remove

    share = source(world, "folder", str(world.share))
    folder_grant_remove(tenant=world.acme, path=world.share)

    assert refused(FolderConnector(share)).code == "location_not_allowed"
    assert opened == []


# --- The API -------------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["web", "git", "folder"])
def test_the_apis_connection_test_refuses_file_sources_without_reaching_them(world, kind):
    location = {"web": world.web.url("/"), "git": world.git.url("/repo.git"), "folder": "/etc"}[kind]
    aimed = source(world, kind, location)

    response = world.client.post(f"/api/v1/sources/{aimed.pk}/test/")

    assert response.status_code == 400 and response.json()["error"]["code"] == "not_a_service"
    assert world.web.connections == world.git.connections == 0
