"""Outbound fetches for a tenant that aim past the address check or the size caps.

Two families of attack on ``core.outbound``:

* NAT64 spellings of internal addresses. The well-known prefix ``64:ff9b::/96`` carries an IPv4
  address in its last 32 bits; the local-use prefix ``64:ff9b:1::/48`` (RFC 8215) carries one
  wherever the local translator's prefix length (RFC 6052: 32 to 96 bits, skipping the "u"
  octet, bits 64 to 71) puts it, so its last 32 bits say nothing: ``64:ff9b:1:7f00:0:100:808:808``
  is 127.0.0.1 to a /48 translator and looks like 8.8.8.8. The local-use prefix is refused unless
  the operator opens it.
* Compressed bodies that unpack past the operator's caps: a page, ``robots.txt`` or a sitemap
  served with ``Content-Encoding: gzip`` (or gzipped) by a loopback server, and a git repository
  over dumb HTTP whose ref list does the same. Each is refused, counting the bytes once
  decompressed, with a message that says so.
"""

from __future__ import annotations

import gzip
import io
import ipaddress

import pytest
from dulwich import porcelain

from core import outbound
from core.outbound import address_allowed, nat64_ipv4
from knowledge.models import Document
from knowledge.services.sources import source_create
from knowledge.services.sync import source_sync
from tests.knowledge.web_site import Response, WebSite, html_page
from tests.security.source_world import dumb_http_pages

LOCAL_USE = "64:ff9b:1::"
WELL_KNOWN = "64:ff9b::"
INTERNAL = ["127.0.0.1", "169.254.169.254", "10.0.0.1", "192.168.1.1", "100.64.0.1", "0.0.0.0"]


def nat64(prefix: str, length: int, ipv4: str) -> str:
    """``ipv4`` embedded in the NAT64 ``prefix`` of ``length`` bits, laid out as RFC 6052 section 2.2
    says (written here from the RFC, independently of ``core.outbound``)."""
    prefix_bytes = ipaddress.IPv6Address(prefix).packed[: length // 8]
    v4 = ipaddress.IPv4Address(ipv4).packed
    if length == 96:
        return str(ipaddress.IPv6Address(prefix_bytes + v4))
    body = bytearray(16)
    body[: len(prefix_bytes)] = prefix_bytes
    position = length // 8
    for octet in v4:
        if position == 8:  # the "u" octet stays zero
            position += 1
        body[position] = octet
        position += 1
    return str(ipaddress.IPv6Address(bytes(body)))


def _spellings() -> list[tuple[str, str]]:
    """(IPv6 spelling, what it stands for) of the internal addresses, under the local-use prefix in
    every layout a /48 allows, and under the well-known prefix."""
    forms = [("64:ff9b:1:7f00:0:100:808:808", "127.0.0.1 to a /48 translator, 8.8.8.8 by its last 32 bits")]
    for ipv4 in INTERNAL:
        forms += [(nat64(LOCAL_USE, length, ipv4), f"{ipv4} (local-use /{length})") for length in (48, 56, 64, 96)]
        forms.append((nat64(WELL_KNOWN, 96, ipv4), f"{ipv4} (well-known /96)"))
    return forms


@pytest.mark.parametrize(("address", "meaning"), _spellings(), ids=lambda value: value)
def test_every_nat64_spelling_of_an_internal_address_is_refused(address, meaning, settings):
    settings.KB_FETCH_ALLOWED_NETWORKS = []
    assert not address_allowed(address), meaning


@pytest.mark.parametrize("length", [48, 56, 64, 96])
def test_the_local_use_prefix_is_refused_even_for_a_public_ipv4_address(length, settings):
    settings.KB_FETCH_ALLOWED_NETWORKS = []
    assert address_allowed("8.8.8.8")
    assert not address_allowed(nat64(LOCAL_USE, length, "8.8.8.8"))


def test_an_intranet_range_the_operator_opens_does_not_open_its_local_use_nat64_forms(settings):
    settings.KB_FETCH_ALLOWED_NETWORKS = ["127.0.0.1/32", "10.0.0.0/8"]
    assert address_allowed("127.0.0.1") and address_allowed(nat64(WELL_KNOWN, 96, "10.0.0.1"))
    assert not any(address_allowed(nat64(LOCAL_USE, length, "127.0.0.1")) for length in (48, 56, 64, 96))
    assert not address_allowed("64:ff9b:1:7f00:0:100:808:808")


def test_the_operator_opens_the_local_use_prefix_by_naming_it(settings):
    settings.KB_FETCH_ALLOWED_NETWORKS = ["64:ff9b:1::/48"]
    assert address_allowed("64:ff9b:1:7f00:0:100:808:808")
    assert not address_allowed(nat64(WELL_KNOWN, 96, "127.0.0.1"))


@pytest.mark.parametrize(
    "address",
    [nat64(WELL_KNOWN, 96, "8.8.8.8"), nat64(WELL_KNOWN, 96, "93.184.216.34"), "64:ff9b::808:808"],
)
def test_a_well_known_nat64_form_of_a_public_address_is_allowed(address, settings):
    settings.KB_FETCH_ALLOWED_NETWORKS = []
    assert address_allowed(address)


@pytest.mark.parametrize("length", [32, 40, 48, 56, 64])
def test_the_well_known_prefix_is_only_a_96_bit_prefix(length, settings):
    """Other layouts under 64:ff9b::/32 are no NAT64 address a translator makes: refused."""
    settings.KB_FETCH_ALLOWED_NETWORKS = []
    assert not address_allowed(nat64("64:ff9b::", length, "8.8.8.8"))


# RFC 6052 section 2.4: 192.0.2.33 under the prefix 2001:db8:122:344::/length.
RFC_6052_EXAMPLES = {
    32: "2001:db8:c000:221::",
    40: "2001:db8:1c0:2:21::",
    48: "2001:db8:122:c000:2:2100::",
    56: "2001:db8:122:3c0:0:221::",
    64: "2001:db8:122:344:c0:2:2100:0",
    96: "2001:db8:122:344::192.0.2.33",
}


@pytest.mark.parametrize(("length", "address"), RFC_6052_EXAMPLES.items())
def test_the_embedded_ipv4_address_is_read_as_rfc_6052_lays_it_out(length, address):
    assert str(nat64_ipv4(ipaddress.IPv6Address(address), length)) == "192.0.2.33"
    assert nat64("2001:db8:122:344::", length, "192.0.2.33") == str(ipaddress.IPv6Address(address))


@pytest.mark.parametrize("length", [48, 56, 64, 96])
def test_a_web_source_at_a_local_use_nat64_address_is_refused_when_it_is_saved(length, admin_client, settings):
    settings.KB_FETCH_ALLOWED_NETWORKS = []
    host = nat64(LOCAL_USE, length, "127.0.0.1")

    response = admin_client.post(
        "/api/v1/sources/",
        {"name": "nat64", "kind": "web", "location": f"http://[{host}]/latest/meta-data/"},
        format="json",
    )

    assert response.status_code == 400
    assert response.json()["error"]["code"] == "address_not_allowed"


# --- Bodies that unpack past the caps ---------------------------------------------------------------


def _bomb(size: int) -> bytes:
    """``size`` bytes of HTML, gzipped to a few kilobytes."""
    html = html_page("Bomb", "Harmless words. " * 20).encode()
    return gzip.compress(html + b" " * (size - len(html)), compresslevel=9)


@pytest.fixture
def site(settings):
    settings.KB_FETCH_ALLOWED_NETWORKS = ["127.0.0.1/32"]
    settings.KB_WEB_MIN_CRAWL_DELAY_S = 0
    settings.KB_WEB_MAX_PAGE_MB = 1
    with WebSite({"/robots.txt": Response(404, "")}) as site:
        yield site


def _web_sync(tenant, location: str):
    source = source_create(tenant=tenant, name="bomb", kind="web", location=location, crawl_delay_s=0)
    return source_sync(source=source)


def test_a_gzipped_page_that_unpacks_past_the_page_cap_is_refused_and_nothing_is_stored(tenant, site):
    bomb = _bomb(3 * 2**20)
    assert len(bomb) < 2**20 // 50
    site.pages["/"] = Response(200, bomb, {"Content-Encoding": "gzip"})

    run = _web_sync(tenant, site.url("/"))

    assert run.status == "failed"
    assert run.error == f"{site.url('/')} is larger than 1 MB once decompressed. Nothing changed."
    assert not Document.objects.filter(tenant=tenant).exists()


def test_a_page_under_the_cap_once_decompressed_is_read(tenant, site):
    site.pages["/"] = Response(200, _bomb(200_000), {"Content-Encoding": "gzip"})

    run = _web_sync(tenant, site.url("/"))

    assert (run.status, run.new) == ("done", 1), run.errors


def test_a_gzipped_robots_txt_that_unpacks_past_the_cap_fails_the_sync(tenant, site):
    site.pages["/"] = Response(200, html_page("Home", "A page."))
    site.pages["/robots.txt"] = Response(
        200,
        gzip.compress(b"User-agent: *\n" + b"#" * 3 * 2**20),
        {"Content-Type": "text/plain", "Content-Encoding": "gzip"},
    )

    run = _web_sync(tenant, site.url("/"))

    assert run.status == "failed"
    assert run.error == f"{site.url('/robots.txt')} is larger than 1 MB once decompressed. Nothing changed."


def test_a_gzipped_sitemap_file_that_unpacks_past_the_cap_fails_the_sync_saying_so(tenant, site):
    listing = b'<?xml version="1.0"?><urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">'
    site.pages["/docs/pages.xml.gz"] = Response(
        200, gzip.compress(listing + b" " * 3 * 2**20 + b"</urlset>"), {"Content-Type": "application/gzip"}
    )

    run = _web_sync(tenant, site.url("/docs/pages.xml.gz"))

    assert run.status == "failed"
    assert run.error == (
        f"{site.url('/docs/pages.xml.gz')}: the sitemap is larger than 1 MB once unpacked. Nothing changed."
    )


@pytest.fixture
def git_site(settings, tmp_path):
    settings.KB_FETCH_ALLOWED_NETWORKS = ["127.0.0.1/32"]
    settings.KB_DATA_DIR = tmp_path / "data"
    settings.KB_GIT_MAX_MB = 1
    work = tmp_path / "work"
    porcelain.init(str(work)).close()
    (work / "notes.md").write_text("# Notes\n\nA small repository.\n")
    porcelain.add(str(work), paths=[str(work / "notes.md")])
    porcelain.commit(str(work), message=b"notes", author=b"A <a@x>", committer=b"A <a@x>")
    bare = tmp_path / "repo.git"
    porcelain.clone(str(work), str(bare), bare=True, errstream=io.BytesIO()).close()
    with WebSite(dumb_http_pages(bare)) as site:
        yield site


def test_a_git_ref_list_that_unpacks_past_the_git_cap_stops_the_fetch(tenant, git_site):
    refs = git_site.pages["/repo.git/info/refs"].body
    padded = refs + b"\n" * 3 * 2**20  # blank lines: a ref list git readers skip
    bomb = Response(200, gzip.compress(padded), {"Content-Type": "text/plain", "Content-Encoding": "gzip"})
    git_site.pages["/repo.git/info/refs"] = git_site.pages["/repo.git/info/refs?service=git-upload-pack"] = bomb
    assert len(bomb.body) < 2**20 // 50

    source = source_create(tenant=tenant, name="bomb", kind="git", location=git_site.url("/repo.git"))
    run = source_sync(source=source)

    assert run.status == "failed"
    assert "the repository is larger than 1 MB once decompressed; nothing of it was kept" in run.error
    assert not Document.objects.filter(tenant=tenant).exists()


def test_a_git_repository_served_gzipped_under_the_cap_is_read(tenant, git_site):
    for path in ("/repo.git/info/refs", "/repo.git/info/refs?service=git-upload-pack"):
        plain = git_site.pages[path].body
        git_site.pages[path] = Response(
            200, gzip.compress(plain), {"Content-Type": "text/plain", "Content-Encoding": "gzip"}
        )

    source = source_create(tenant=tenant, name="small", kind="git", location=git_site.url("/repo.git"))
    run = source_sync(source=source)

    assert (run.status, run.new) == ("done", 1), (run.error, run.errors)


def test_a_guarded_pool_manager_counts_what_a_body_unpacks_to_even_when_read_at_once(settings):
    settings.KB_FETCH_ALLOWED_NETWORKS = ["127.0.0.1/32"]
    bomb = gzip.compress(b"\0" * 4 * 2**20)
    with WebSite({"/bomb": Response(200, bomb, {"Content-Encoding": "gzip"})}) as site:
        manager = outbound.guarded_pool_manager(
            timeout=5, max_bytes=2**20, max_decoded_bytes=2**20, what="the download"
        )
        response = manager.request("GET", site.url("/bomb"), preload_content=False)
        with pytest.raises(outbound.FetchLimitExceeded, match="the download is larger than 1 MB once decompressed"):
            response.read()
