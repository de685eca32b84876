"""Outbound connections for tenants: which addresses are public, and the check where the socket opens."""

import socket

import pytest

from core import outbound
from core.outbound import AddressNotAllowed, address_allowed, connect, host_check, host_resolve
from tests.knowledge.web_site import WebSite

NOT_PUBLIC = [
    "127.0.0.1",
    "127.255.255.254",
    "0.0.0.0",
    "10.1.2.3",
    "172.16.0.1",
    "192.168.1.1",
    "100.64.0.1",  # shared address space
    "169.254.169.254",  # cloud metadata
    "192.0.2.1",  # documentation
    "198.18.0.1",  # benchmarking
    "224.0.0.1",  # multicast
    "239.255.255.250",
    "240.0.0.1",  # reserved
    "255.255.255.255",
    "::1",
    "::",
    "fe80::1",
    "fc00::1",
    "fd12:3456::1",
    "fec0::1",
    "ff02::1",
    "2001:db8::1",
    "::ffff:127.0.0.1",  # IPv4-mapped
    "::ffff:169.254.169.254",
    "::ffff:10.0.0.1",
    "64:ff9b::7f00:1",  # NAT64 of 127.0.0.1
    "2002:7f00:1::",  # 6to4 of 127.0.0.1
    "2002:a9fe:a9fe::",  # 6to4 of 169.254.169.254
]
PUBLIC = ["93.184.216.34", "8.8.8.8", "2606:4700:4700::1111", "::ffff:8.8.8.8", "64:ff9b::808:808"]


@pytest.mark.parametrize("address", NOT_PUBLIC)
def test_an_internal_address_is_not_public(address, settings):
    settings.KB_FETCH_ALLOWED_NETWORKS = []
    assert not address_allowed(address)


@pytest.mark.parametrize("address", PUBLIC)
def test_a_global_unicast_address_is_public(address):
    assert address_allowed(address)


@pytest.mark.parametrize("spelling", ["2130706433", "127.1", "0x7f.0.0.1", "017700000001", "0.0.0.0", "localhost"])
def test_odd_spellings_resolve_to_loopback_and_are_refused(spelling, settings):
    settings.KB_FETCH_ALLOWED_NETWORKS = []
    with pytest.raises(AddressNotAllowed, match="address not allowed"):
        host_resolve(spelling, 80)


def test_the_operator_opens_a_range_and_its_mapped_ipv6_form(settings):
    settings.KB_FETCH_ALLOWED_NETWORKS = ["10.20.0.0/16"]

    assert address_allowed("10.20.3.4") and address_allowed("::ffff:10.20.3.4")
    assert not address_allowed("10.21.0.1") and not address_allowed("127.0.0.1")


def test_a_name_resolving_to_a_public_and_a_private_address_is_refused(monkeypatch):
    answers = [
        (socket.AF_INET, socket.SOCK_STREAM, 6, "", ("93.184.216.34", 80)),
        (socket.AF_INET, socket.SOCK_STREAM, 6, "", ("10.0.0.5", 80)),
    ]
    monkeypatch.setattr(socket, "getaddrinfo", lambda *args, **kwargs: answers)

    with pytest.raises(AddressNotAllowed):
        host_resolve("mixed.example", 80)


def test_a_connection_opens_to_the_very_address_that_was_checked(monkeypatch, settings):
    """DNS rebinding: the first lookup says public, a second would say loopback; there is no second."""
    settings.KB_FETCH_ALLOWED_NETWORKS = []
    with WebSite({"/": (200, "hello")}) as site:
        lookups = []

        def rebinding(host, port, *args, **kwargs):
            lookups.append(host)
            address = "93.184.216.34" if len(lookups) == 1 else "127.0.0.1"
            return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", (address, port))]

        opened = []
        real_connect = socket.socket.connect
        monkeypatch.setattr(socket, "getaddrinfo", rebinding)
        monkeypatch.setattr(socket.socket, "connect", lambda self, address: opened.append(address) or None)

        connect("rebind.example", site.port, 1.0).close()

        monkeypatch.setattr(socket.socket, "connect", real_connect)
        assert lookups == ["rebind.example"]
        assert opened == [("93.184.216.34", site.port)]
        assert site.connections == 0


def test_checking_a_name_that_does_not_resolve_passes_for_now(monkeypatch):
    def unknown(*args, **kwargs):
        raise socket.gaierror("Name or service not known")

    monkeypatch.setattr(socket, "getaddrinfo", unknown)

    host_check("wiki.acme.example")  # no error: every connection is checked again


def test_a_guarded_http_client_refuses_loopback_without_connecting(settings):
    import httpx2

    settings.KB_FETCH_ALLOWED_NETWORKS = []
    with WebSite({"/": (200, "hello")}) as site:
        with httpx2.Client(transport=outbound.guarded_http_transport(), trust_env=False) as client:
            with pytest.raises(AddressNotAllowed):
                client.get(site.url("/"))
        assert site.connections == 0

        settings.KB_FETCH_ALLOWED_NETWORKS = ["127.0.0.1/32"]
        with httpx2.Client(transport=outbound.guarded_http_transport(), trust_env=False) as client:
            assert client.get(site.url("/")).text == "hello"


def test_a_guarded_pool_manager_refuses_loopback_and_stops_past_its_byte_budget(settings):
    settings.KB_FETCH_ALLOWED_NETWORKS = []
    with WebSite({"/big": (200, "x" * 200_000)}) as site:
        with pytest.raises(AddressNotAllowed):
            outbound.guarded_pool_manager(timeout=5).request("GET", site.url("/big"))
        assert site.connections == 0

        settings.KB_FETCH_ALLOWED_NETWORKS = ["127.0.0.1/32"]
        manager = outbound.guarded_pool_manager(timeout=5, max_bytes=50_000, what="the download")
        with pytest.raises(outbound.FetchLimitExceeded, match="the download is larger than"):
            manager.request("GET", site.url("/big"))


def test_a_bad_allowed_network_stops_the_server_from_starting():
    import subprocess
    import sys

    result = subprocess.run(
        [
            sys.executable,
            "-c",
            "import django, os; os.environ['DJANGO_SETTINGS_MODULE']='config.settings'; django.setup()",
        ],
        env={**__import__("os").environ, "KB_FETCH_ALLOWED_NETWORKS": "10.0.0.0/33"},
        capture_output=True,
        text=True,
    )
    assert result.returncode != 0
    assert "KB_FETCH_ALLOWED_NETWORKS: '10.0.0.0/33' is not a network in CIDR form" in result.stderr
