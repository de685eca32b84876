"""Outbound connections made for a tenant: public addresses only, checked where the socket opens.

Every URL the product fetches for a tenant (a web source's pages, sitemaps, ``robots.txt`` and
each redirect hop; a git source's HTTP(S) remote and its redirects) connects through
``connect``: the host is resolved once, every address it resolves to must be allowed, and the
socket opens to one of those very addresses, so no second lookup can swap in another (DNS
rebinding). Allowed means global unicast: not loopback, private (RFC 1918), shared (100.64/10),
link-local (169.254/16, the cloud metadata address among them), unique-local, site-local,
multicast, reserved, unspecified or documentation ranges; IPv4-mapped, 6to4 and NAT64 IPv6
forms of the well-known prefix ``64:ff9b::/96`` are judged by the IPv4 address inside them
(``nat64_ipv4``, RFC 6052), Teredo is refused. The NAT64 local-use prefix ``64:ff9b:1::/48``
(RFC 8215) is refused outright: which IPv4 address it stands for depends on the local
translator's prefix length, so only the operator can open it. Odd spellings (``2130706433``,
``127.1``, ``0x7f.1``, ``0.0.0.0``) are what the resolver makes of them, and are judged as such.

Only the operator opens more: ``KB_FETCH_ALLOWED_NETWORKS`` (CIDRs) lists intranet ranges that
tenants' sources may reach (the project's own tests open 127.0.0.1 for their loopback servers).

``guarded_http_transport`` gives httpx (``httpx2``) clients this check, and
``guarded_pool_manager`` gives urllib3 (dulwich's HTTP client) the same. Proxies from the
environment are not used for these fetches: the check must see the address it connects to.

Bodies are capped on the bytes they unpack to (``Content-Encoding``), not only on the bytes on
the wire, so a few kilobytes of gzip cannot inflate past a cap: ``body_read`` reads an httpx
response so, and ``guarded_pool_manager(max_decoded_bytes=...)`` counts what urllib3 decodes.

A refused connection raises ``AddressNotAllowed``; failures say only "could not fetch"
(``FETCH_FAILED``), never whether a port is open, refused or silent.
"""

from __future__ import annotations

import ipaddress
import socket
import time
from collections.abc import Iterable

from django.conf import settings

from core.errors import ApplicationError

FETCH_FAILED = "could not fetch"
NOT_ALLOWED = "address not allowed"

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address

# Ranges Python's ``is_global`` lets through that a tenant's fetch must not reach.
_NOT_PUBLIC_V4 = [
    ipaddress.ip_network(n)
    for n in (
        "0.0.0.0/8",  # "this network"
        "100.64.0.0/10",  # shared address space (carrier-grade NAT)
        "192.0.0.0/24",  # IETF protocol assignments
        "192.0.2.0/24",  # documentation
        "198.18.0.0/15",  # benchmarking
        "198.51.100.0/24",  # documentation
        "203.0.113.0/24",  # documentation
        "224.0.0.0/4",  # multicast
        "240.0.0.0/4",  # reserved, broadcast
    )
]
# NAT64 (RFC 6052): the well-known prefix, always /96, and the local-use prefix (RFC 8215), whose
# IPv4 address sits wherever the local translator's prefix length puts it.
NAT64_WELL_KNOWN = ipaddress.ip_network("64:ff9b::/96")
NAT64_LOCAL_USE = ipaddress.ip_network("64:ff9b:1::/48")
NAT64_PREFIX_LENGTHS = (32, 40, 48, 56, 64, 96)
_NOT_PUBLIC_V6 = [
    ipaddress.ip_network(n)
    for n in (
        "::/128",
        "::1/128",
        "100::/64",  # discard-only
        "2001::/23",  # IETF protocol assignments (Teredo 2001::/32 among them)
        "2001:db8::/32",  # documentation
        "fc00::/7",  # unique-local
        "fe80::/10",  # link-local
        "fec0::/10",  # site-local (deprecated)
        "ff00::/8",  # multicast
    )
]


class AddressNotAllowed(ApplicationError):
    """A fetch for a tenant would reach an address that is not public (and not opened by the operator)."""

    code = "address_not_allowed"
    status = 400


def nat64_ipv4(address: ipaddress.IPv6Address, prefix_length: int) -> ipaddress.IPv4Address:
    """The IPv4 address embedded in ``address`` by a NAT64 prefix of ``prefix_length`` bits (RFC
    6052, section 2.2): 32, 40, 48, 56, 64 or 96 (``ValueError`` for another).

    The IPv4 address's 32 bits follow the prefix, except that bits 64 to 71 (the "u" octet) are
    always skipped: ``64:ff9b:1:7f00:0:100::`` under a /48 prefix is 127.0.0.1.
    """
    if prefix_length not in NAT64_PREFIX_LENGTHS:
        raise ValueError(f"not an RFC 6052 prefix length: {prefix_length}")
    packed = address.packed
    if prefix_length == 96:
        return ipaddress.IPv4Address(packed[12:])
    without_u = packed[:8] + packed[9:]
    start = prefix_length // 8
    return ipaddress.IPv4Address(without_u[start : start + 4])


def _embedded_ipv4(address: ipaddress.IPv6Address) -> ipaddress.IPv4Address | None:
    """The IPv4 address an IPv6 address stands for (mapped, 6to4, well-known NAT64), if any."""
    if address.ipv4_mapped is not None:
        return address.ipv4_mapped
    if address.sixtofour is not None:
        return address.sixtofour
    if address in NAT64_WELL_KNOWN:
        return nat64_ipv4(address, 96)
    return None


def address_public(address: IPAddress) -> bool:
    """Whether ``address`` is global unicast (module docstring), IPv6 forms of IPv4 judged by the
    IPv4 address inside; never an address of the NAT64 local-use prefix."""
    if isinstance(address, ipaddress.IPv6Address):
        if address in NAT64_LOCAL_USE:
            return False
        inner = _embedded_ipv4(address)
        if inner is not None:
            return address_public(inner)
        if any(address in network for network in _NOT_PUBLIC_V6):
            return False
    elif any(address in network for network in _NOT_PUBLIC_V4):
        return False
    return (
        address.is_global
        and not address.is_private
        and not address.is_loopback
        and not address.is_link_local
        and not address.is_multicast
        and not address.is_reserved
        and not address.is_unspecified
    )


def allowed_networks() -> list[ipaddress.IPv4Network | ipaddress.IPv6Network]:
    """The operator's ``KB_FETCH_ALLOWED_NETWORKS`` as networks; ``ValueError`` for a bad entry."""
    return [ipaddress.ip_network(entry.strip(), strict=False) for entry in settings.KB_FETCH_ALLOWED_NETWORKS]


def address_allowed(address: IPAddress | str) -> bool:
    """Whether a tenant's fetch may connect to ``address``: public, or in ``KB_FETCH_ALLOWED_NETWORKS``
    (an IPv6 form of an IPv4 address also when that IPv4 address is; an address of the NAT64
    local-use prefix only when a network listed holds the IPv6 address itself)."""
    if isinstance(address, str):
        address = ipaddress.ip_address(address.split("%", 1)[0])  # drop an IPv6 zone index
    plain = _embedded_ipv4(address) if isinstance(address, ipaddress.IPv6Address) else None
    for network in allowed_networks():
        if address in network or (plain is not None and plain in network):
            return True
    return address_public(address)


def host_resolve(host: str, port: int) -> list[tuple]:
    """``getaddrinfo`` results (family, type, proto, canonname, sockaddr) for TCP to ``host``:``port``,
    after checking that every address is allowed.

    ``AddressNotAllowed`` when any is not (a name that resolves to a public and a private address
    is refused as a whole); ``OSError`` when the name does not resolve.
    """
    host = host.strip("[]")
    infos = socket.getaddrinfo(host, port, 0, socket.SOCK_STREAM)
    if not infos:
        raise OSError(f"{host} does not resolve")
    for info in infos:
        if not address_allowed(info[4][0]):
            raise AddressNotAllowed(f"{host}: {NOT_ALLOWED}")
    return infos


def host_check(host: str, port: int = 443) -> None:
    """Refuse ``host`` now if it resolves to an address that is not allowed (``AddressNotAllowed``).

    For checking a location when it is saved: a name that does not resolve (yet) passes, since
    every connection is checked again (``connect``).
    """
    try:
        host_resolve(host, port)
    except (OSError, UnicodeError, ValueError):
        return


def connect(host: str, port: int, timeout: float | None, *, socket_options: Iterable[tuple] = ()) -> socket.socket:
    """A TCP socket to ``host``:``port``, opened to an address ``host_resolve`` checked.

    ``AddressNotAllowed`` when the host resolves to an address that is not allowed; ``OSError``
    when it cannot be reached at any of its addresses.
    """
    error: OSError | None = None
    for family, kind, proto, _name, address in host_resolve(host, port):
        sock = socket.socket(family, kind, proto)
        try:
            for option in socket_options:
                sock.setsockopt(*option)
            if timeout is not None:
                sock.settimeout(timeout)
            sock.connect(address)
            return sock
        except OSError as exc:
            sock.close()
            error = exc
    raise error or OSError(FETCH_FAILED)


# -- httpx (httpx2) -------------------------------------------------------------------------------


def guarded_http_transport(**options):
    """An ``httpx2.HTTPTransport`` whose every connection goes through ``connect``.

    ``options`` go to ``HTTPTransport`` (``verify``, ``retries``...); proxies are never used.
    """
    import httpcore2
    import httpx2
    from httpcore2._backends.sync import SyncBackend, SyncStream

    class GuardedBackend(SyncBackend):
        def connect_tcp(self, host, port, timeout=None, local_address=None, socket_options=None):
            try:
                sock = connect(host, port, timeout, socket_options=socket_options or ())
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            except TimeoutError as exc:
                raise httpcore2.ConnectTimeout(FETCH_FAILED) from exc
            except OSError as exc:
                raise httpcore2.ConnectError(FETCH_FAILED) from exc
            return SyncStream(sock)

    transport = httpx2.HTTPTransport(trust_env=False, **options)
    transport._pool._network_backend = GuardedBackend()  # httpcore's ConnectionPool(network_backend=...)
    return transport


# -- urllib3 (dulwich) ----------------------------------------------------------------------------


class FetchLimitExceeded(ApplicationError):
    """A fetch read more bytes, or took longer, than the operator allows."""

    code = "fetch_limit_exceeded"
    status = 400


class _Budget:
    """Bytes and time left to one fetch (``None``: no limit): ``spend`` the bytes downloaded,
    ``spend_decoded`` what the bodies unpack to (``max_decoded_bytes``); each raises
    ``FetchLimitExceeded`` past its limit or the deadline."""

    def __init__(
        self, max_bytes: int | None, deadline: float | None, *, what: str, max_decoded_bytes: int | None = None
    ):
        self.left, self.deadline, self.what = max_bytes, deadline, what
        self.max_bytes = max_bytes
        self.max_decoded_bytes = self.decoded_left = max_decoded_bytes

    def spend(self, count: int) -> None:
        if self.left is not None:
            self.left -= count
            if self.left < 0:
                raise FetchLimitExceeded(f"{self.what} is larger than {self.max_bytes / 2**20:g} MB")
        self._in_time()

    def spend_decoded(self, count: int) -> None:
        if self.decoded_left is not None:
            self.decoded_left -= count
            if self.decoded_left < 0:
                raise FetchLimitExceeded(
                    f"{self.what} is larger than {self.max_decoded_bytes / 2**20:g} MB once decompressed"
                )
        self._in_time()

    def _in_time(self) -> None:
        if self.deadline is not None and time.monotonic() > self.deadline:
            raise FetchLimitExceeded(f"{self.what} took too long")


def body_read(response, *, max_bytes: int, what: str) -> bytes:
    """The body of an open, streamed ``httpx2`` response, decoded as its ``Content-Encoding`` says
    (gzip, deflate, and br or zstd where their libraries are installed), refused past ``max_bytes``.

    The bytes counted are the decoded ones, as they stream (``iter_bytes``, which httpx2 inflates
    in pieces of at most 1 MiB, so a small compressed body never unpacks in one go), after a
    declared ``Content-Length`` over ``max_bytes`` is refused before anything is read.
    ``FetchLimitExceeded`` ("``what`` is larger than N MB once decompressed") past the cap;
    nothing read is kept.
    """
    budget = _Budget(None, None, what=what, max_decoded_bytes=max_bytes)
    length = response.headers.get("content-length", "")
    if length.isdigit() and int(length) > max_bytes:
        raise FetchLimitExceeded(f"{what} is larger than {max_bytes / 2**20:g} MB")
    chunks = []
    for chunk in response.iter_bytes():
        budget.spend_decoded(len(chunk))
        chunks.append(chunk)
    return b"".join(chunks)


class _CountedReader:
    """A response's socket file whose every byte read is spent from a ``_Budget``."""

    def __init__(self, raw, budget: _Budget):
        self._raw, self._budget = raw, budget

    def _spent(self, data):
        self._budget.spend(len(data))
        return data

    def read(self, *args):
        return self._spent(self._raw.read(*args))

    def read1(self, *args):
        return self._spent(self._raw.read1(*args))

    def readline(self, *args):
        return self._spent(self._raw.readline(*args))

    def readinto(self, buffer):
        count = self._raw.readinto(buffer)
        self._budget.spend(count or 0)
        return count

    def peek(self, *args):
        return self._raw.peek(*args)

    def __getattr__(self, name):  # close, closed, flush, fileno...
        return getattr(self._raw, name)


# Most bytes one decompression step may produce before they are counted.
_DECODE_PIECE = 2**16


class _CountedDecoder:
    """A urllib3 content decoder (gzip, deflate, br, zstd) whose output is spent from a ``_Budget``
    (``spend_decoded``) in pieces of at most ``_DECODE_PIECE`` bytes, also when urllib3 asks for
    everything at once (``read()`` without a size), so a small compressed body cannot unpack
    past the cap in one call."""

    def __init__(self, decoder, budget: _Budget):
        self._decoder, self._budget = decoder, budget

    def _spent(self, data: bytes) -> bytes:
        self._budget.spend_decoded(len(data))
        return data

    def decompress(self, data: bytes, max_length: int = -1) -> bytes:
        if 0 <= max_length <= _DECODE_PIECE:  # 0: urllib3 keeps the data for later
            return self._spent(self._decoder.decompress(data, max_length=max_length))
        pieces, size = [], 0
        while max_length < 0 or size < max_length:
            step = _DECODE_PIECE if max_length < 0 else min(_DECODE_PIECE, max_length - size)
            piece = self._spent(self._decoder.decompress(data, max_length=step))
            data = b""
            pieces.append(piece)
            size += len(piece)
            if not piece or not self._decoder.has_unconsumed_tail:
                break
        return b"".join(pieces)

    def flush(self) -> bytes:
        rest = self.decompress(b"")  # what is still pending, counted piece by piece
        return rest + self._spent(self._decoder.flush())

    def __getattr__(self, name):  # has_unconsumed_tail...
        return getattr(self._decoder, name)


def guarded_pool_manager(
    *,
    timeout: float,
    max_bytes: int | None = None,
    max_decoded_bytes: int | None = None,
    deadline: float | None = None,
    what: str = "the fetch",
    **options,
):
    """A ``urllib3.PoolManager`` whose every connection (redirects included) goes through
    ``connect``; ``timeout`` is the seconds a connection or read may wait.

    ``max_bytes`` caps the bytes all its responses may read together (headers included),
    ``max_decoded_bytes`` what their bodies may unpack to together (``Content-Encoding`` gzip,
    deflate, br, zstd: counted as urllib3 decodes them, in bounded pieces) and ``deadline`` (a
    ``time.monotonic()`` value) the time they may take: past any, a read raises
    ``FetchLimitExceeded`` naming ``what``.
    """
    import http.client

    import urllib3
    from urllib3.connection import HTTPConnection, HTTPSConnection
    from urllib3.connectionpool import HTTPConnectionPool, HTTPSConnectionPool
    from urllib3.exceptions import NewConnectionError

    budget = _Budget(max_bytes, deadline, what=what, max_decoded_bytes=max_decoded_bytes)

    class CountedResponse(http.client.HTTPResponse):
        def __init__(self, sock, *args, **kwargs):
            super().__init__(sock, *args, **kwargs)
            self.fp = _CountedReader(self.fp, budget)

    def _decoded_counted(response):
        """``response`` (urllib3's) with its content decoder counting into the budget."""
        if max_decoded_bytes is not None:
            response._init_decoder()  # urllib3 picks the decoder from Content-Encoding
            if response._decoder is not None:
                response._decoder = _CountedDecoder(response._decoder, budget)
        return response

    def new_conn(self):
        try:
            return connect(self._dns_host, self.port, self.timeout, socket_options=self.socket_options or ())
        except AddressNotAllowed:
            raise
        except OSError as exc:
            raise NewConnectionError(self, FETCH_FAILED) from exc

    class GuardedHTTPConnection(HTTPConnection):
        _new_conn = new_conn
        response_class = CountedResponse

        def getresponse(self):
            return _decoded_counted(super().getresponse())

    class GuardedHTTPSConnection(HTTPSConnection):
        _new_conn = new_conn
        response_class = CountedResponse

        def getresponse(self):
            return _decoded_counted(super().getresponse())

    class GuardedHTTPConnectionPool(HTTPConnectionPool):
        ConnectionCls = GuardedHTTPConnection

    class GuardedHTTPSConnectionPool(HTTPSConnectionPool):
        ConnectionCls = GuardedHTTPSConnection

    manager = urllib3.PoolManager(timeout=urllib3.Timeout(connect=timeout, read=timeout), **options)
    manager.pool_classes_by_scheme = {"http": GuardedHTTPConnectionPool, "https": GuardedHTTPSConnectionPool}
    return manager
