"""The fetches this server makes to identity providers: Authlib sessions whose every answer is
read whole as it arrives and decompressed here, in small steps, never past
``FETCH_MAX_DECODED_BYTES`` once decompressed (all the answers of one step together): a small gzip
body that inflates to gigabytes (a "gzip bomb") is refused after 1 MB of it. Only gzip and deflate
are asked for and read.

A guarded session (a tenant's own provider, ``sso.providers``) connects through
``core.outbound``: public addresses only, or the ranges the operator opened
(``KB_FETCH_ALLOWED_NETWORKS``), each redirect hop checked, no proxies from the environment, at
most ``FETCH_MAX_BYTES`` read by the fetches of one step. An unguarded one (the installation's
provider) goes out like any fetch the operator configures.
"""

from __future__ import annotations

import time
import zlib

from core.errors import ApplicationError

FETCH_TIMEOUT_S = 10
FETCH_MAX_BYTES = 1024 * 1024
# What one step's answers may read once decompressed, together; and the size of each read.
FETCH_MAX_DECODED_BYTES = FETCH_MAX_BYTES
_READ_BYTES = 16 * 1024
# The encodings asked for (Accept-Encoding) and read; an answer in another is refused.
ACCEPT_ENCODING = "gzip, deflate"


class ProviderUnavailable(ApplicationError):
    """The provider could not be reached, or served a discovery document or keys this server cannot use."""

    code = "provider_unavailable"
    status = 502


class _DecodedBudget:
    """Bytes the answers of one step may still hold once decompressed."""

    def __init__(self, max_bytes: int):
        self.max_bytes = self.left = max_bytes

    def spend(self, count: int) -> None:
        self.left -= count
        if self.left < 0:
            raise ProviderUnavailable(
                f"The identity provider's answer is larger than {self.max_bytes / 2**20:g} MB once decompressed."
            )


def _coding(content_encoding: str) -> str:
    """The one coding of a ``Content-Encoding`` header to undo: ``gzip``, ``deflate`` or ``""``.
    ``ProviderUnavailable`` for any other, or for several."""
    codings = [c.strip().lower() for c in content_encoding.split(",") if c.strip().lower() not in ("", "identity")]
    codings = ["gzip" if c == "x-gzip" else c for c in codings]
    if len(codings) > 1 or (codings and codings[0] not in ("gzip", "deflate")):
        raise ProviderUnavailable(
            f"The identity provider's answer is encoded as {content_encoding[:100]!r}; only gzip or deflate is read."
        )
    return codings[0] if codings else ""


def _decompressor(coding: str, *, raw_deflate: bool = False):
    if coding == "gzip":
        return zlib.decompressobj(16 + zlib.MAX_WBITS)
    return zlib.decompressobj(-zlib.MAX_WBITS if raw_deflate else zlib.MAX_WBITS)


def _chunks(raw):
    """``raw``'s body as it arrives, still encoded; ``requests.ConnectionError`` when reading fails."""
    import requests
    from urllib3.exceptions import HTTPError as Urllib3Error

    while True:
        try:
            data = raw.read(_READ_BYTES, decode_content=False)
        except Urllib3Error as exc:
            raise requests.ConnectionError(f"could not read the answer: {type(exc).__name__}") from exc
        if not data:
            return
        yield data


def body_read(raw, *, content_encoding: str, budget: _DecodedBudget) -> bytes:
    """The whole body of ``raw`` (a urllib3 response whose body is not read yet), decompressed as
    ``content_encoding`` says (gzip, deflate or none) in steps that never make more than the
    bytes ``budget`` has left, so memory never holds more than that, whatever the compressed body
    would inflate to. Bytes after the end of the compressed stream are ignored (as urllib3 does),
    but count against the budget.

    ``ProviderUnavailable`` past the budget, for another encoding, or for a body that does not
    decompress; ``requests.ConnectionError`` when the connection fails while reading.
    """
    coding = _coding(content_encoding)
    body = bytearray()
    if not coding:
        for data in _chunks(raw):
            budget.spend(len(data))
            body += data
        return bytes(body)
    decoder = _decompressor(coding)
    fresh = True  # the decoder has made nothing yet
    raw_deflate = False
    ended = False  # the compressed stream ended
    for data in _chunks(raw):
        if ended:
            budget.spend(len(data))
        while data and not ended:
            try:
                piece = decoder.decompress(data, budget.left + 1)
            except zlib.error:
                if coding == "deflate" and not body and not raw_deflate:  # deflate without its zlib wrapper
                    decoder, raw_deflate = _decompressor(coding, raw_deflate=True), True
                    continue
                if fresh and body:  # not another gzip member after the last: ignored
                    ended = True
                    budget.spend(len(data))
                    break
                raise ProviderUnavailable("The identity provider's answer could not be decompressed.") from None
            budget.spend(len(piece))
            body += piece
            fresh = fresh and not piece
            if not decoder.eof:
                data = decoder.unconsumed_tail
            elif coding == "gzip":  # another member may follow
                data, decoder, fresh = decoder.unused_data, _decompressor(coding), True
            else:
                ended = True
                budget.spend(len(decoder.unused_data))
    return bytes(body)


def _decoded_cap(adapter_class, budget: _DecodedBudget):
    """``adapter_class`` (a requests ``HTTPAdapter``) reading each answer whole as it arrives with
    ``body_read`` under ``budget``, so requests itself never decompresses an answer (redirects'
    bodies included)."""

    class DecodedCapAdapter(adapter_class):
        def build_response(self, req, resp):
            response = super().build_response(req, resp)
            try:
                response._content = body_read(
                    resp, content_encoding=response.headers.get("Content-Encoding", ""), budget=budget
                )
            except BaseException:
                resp.close()
                raise
            response._content_consumed = True
            resp.release_conn()
            return response

    return DecodedCapAdapter


def _plain_adapter():
    """A requests adapter as requests makes them, with the decompressed-bytes cap."""
    from requests.adapters import HTTPAdapter

    return _decoded_cap(HTTPAdapter, _DecodedBudget(FETCH_MAX_DECODED_BYTES))()


def _guarded_adapter():
    """A requests adapter whose connections (redirects included) go through ``core.outbound``,
    with the decompressed-bytes cap."""
    from requests.adapters import HTTPAdapter

    from core.outbound import guarded_pool_manager

    class GuardedAdapter(HTTPAdapter):
        def init_poolmanager(self, connections, maxsize, block=False, **pool_kwargs):
            self.poolmanager = guarded_pool_manager(
                timeout=FETCH_TIMEOUT_S,
                max_bytes=FETCH_MAX_BYTES,
                deadline=time.monotonic() + 3 * FETCH_TIMEOUT_S,
                what="the identity provider's answer",
                num_pools=connections,
                maxsize=maxsize,
                block=block,
                **pool_kwargs,
            )

    return _decoded_cap(GuardedAdapter, _DecodedBudget(FETCH_MAX_DECODED_BYTES))()


def session_class(*, guarded: bool):
    """Authlib's requests session for ``provider``: a timeout on every request, only gzip and
    deflate asked for, every answer decompressed under ``FETCH_MAX_DECODED_BYTES`` (module
    docstring), and when ``guarded`` (a tenant's provider) the ``core.outbound`` adapter and no
    proxies from the environment. One session is one step (discovery and keys, the code exchange, the userinfo)."""
    from authlib.integrations.requests_client import OAuth2Session

    class ProviderSession(OAuth2Session):
        def __init__(self, *args, **kwargs):
            kwargs.setdefault("default_timeout", FETCH_TIMEOUT_S)
            super().__init__(*args, **kwargs)
            self.max_redirects = 5
            self.headers["Accept-Encoding"] = ACCEPT_ENCODING
            if guarded:
                self.trust_env = False  # environment proxies would hide the address from the check
            adapter = _guarded_adapter() if guarded else _plain_adapter()
            self.mount("http://", adapter)
            self.mount("https://", adapter)

    return ProviderSession
