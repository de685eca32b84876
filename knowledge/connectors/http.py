"""The HTTP layer of the service connectors: the outbound address guard, retries and clear errors.

Every request a service connector makes for a tenant connects through ``core.outbound.connect``
(public addresses only, unless the operator's ``KB_FETCH_ALLOWED_NETWORKS`` opens an intranet
range for a self-hosted server), with no proxy from the environment.

Retries are urllib3's ``Retry`` (a well-kept library, not our own loop): a 429 or 503 with
``Retry-After`` waits what the service asks (at most ``MAX_RETRY_AFTER_S``), other 5xx answers
and dropped connections are retried with exponential backoff, ``KB_CONNECTOR_RETRIES`` times.

``guarded_session`` serves the clients built on ``requests`` (atlassian-python-api, jira,
PyGithub); ``guarded_pool`` the ones that take a urllib3 pool. ``response_raise`` turns the
last answer into ``CredentialRejected`` (401, 403 on the token itself) or ``SourceUnreachable``.
"""

from __future__ import annotations

from django.conf import settings

from core.outbound import guarded_pool_manager
from knowledge.connectors.base import CredentialRejected, SourceUnreachable

# A service asking for a longer pause than this fails the run (it resumes at the next sync).
MAX_RETRY_AFTER_S = 120
RETRY_STATUSES = (429, 500, 502, 503, 504)
# The most a single response may read (a page of a listing, an attachment), before decoding.
MAX_RESPONSE_BYTES = 64 * 1024 * 1024


def retry_policy():
    """urllib3 ``Retry``: ``KB_CONNECTOR_RETRIES`` tries on 429/5xx and dropped connections,
    honouring ``Retry-After`` up to ``MAX_RETRY_AFTER_S`` (a longer wait raises
    ``SourceUnreachable``: the next sync resumes from its checkpoint), backoff
    ``KB_CONNECTOR_BACKOFF_S`` x 2^n (capped at 30 s)."""
    from urllib3.util.retry import Retry

    class CappedRetry(Retry):
        def sleep_for_retry(self, response) -> bool:
            wait = self.get_retry_after(response)
            if wait is not None and wait > MAX_RETRY_AFTER_S:
                raise SourceUnreachable(
                    f"The service asked to wait {wait:.0f} s before the next request (rate limited); "
                    "the next sync resumes where this one stopped."
                )
            return super().sleep_for_retry(response)

    return CappedRetry(
        total=settings.KB_CONNECTOR_RETRIES,
        connect=settings.KB_CONNECTOR_RETRIES,
        read=settings.KB_CONNECTOR_RETRIES,
        status=settings.KB_CONNECTOR_RETRIES,
        status_forcelist=RETRY_STATUSES,
        allowed_methods=None,  # every method: the connectors only read (GraphQL and search are POSTs)
        backoff_factor=settings.KB_CONNECTOR_BACKOFF_S,
        backoff_max=30,
        respect_retry_after_header=True,
        raise_on_status=False,  # the last answer reaches the client, which says what went wrong
    )


def guarded_pool(*, timeout: float | None = None, **options):
    """A urllib3 ``PoolManager`` through the address guard, with ``retry_policy``; ``timeout``
    defaults to ``KB_CONNECTOR_TIMEOUT_S``. ``options`` go to ``guarded_pool_manager``
    (``max_decoded_bytes`` caps what all its responses together may unpack to)."""
    return guarded_pool_manager(
        timeout=timeout or settings.KB_CONNECTOR_TIMEOUT_S,
        retries=retry_policy(),
        what="a connector's request",
        **options,
    )


def guarded_session(*, timeout: float | None = None):
    """A ``requests.Session`` whose http and https requests go through ``guarded_pool``.

    Environment proxies and ``.netrc`` are ignored (``trust_env = False``). A request without a
    timeout of its own gets ``KB_CONNECTOR_TIMEOUT_S``.
    """
    import requests
    from requests.adapters import HTTPAdapter

    limit = timeout or settings.KB_CONNECTOR_TIMEOUT_S

    class GuardedAdapter(HTTPAdapter):
        def init_poolmanager(self, connections, maxsize, block=False, **pool_kwargs):
            self.poolmanager = guarded_pool_manager(
                timeout=limit, num_pools=connections, maxsize=maxsize, block=block, what="a connector's request"
            )

        def proxy_manager_for(self, proxy, **proxy_kwargs):  # never a proxy: the guard must see the address
            raise SourceUnreachable("Connectors do not use proxies.")

        def send(self, request, **kwargs):
            if kwargs.get("timeout") is None:
                kwargs["timeout"] = limit
            kwargs["proxies"] = {}
            return super().send(request, **kwargs)

    session = requests.Session()
    session.trust_env = False
    adapter = GuardedAdapter(max_retries=retry_policy())
    session.mount("http://", adapter)
    session.mount("https://", adapter)
    return session


def status_raise(status: int, *, what: str, detail: str = "") -> None:
    """Raise the connector error for an HTTP ``status`` the service answered ``what`` with (after
    retries): ``CredentialRejected`` for 401 (and 403 when ``detail`` says the token itself is
    refused), ``SourceUnreachable`` for 429 and 5xx; nothing for other statuses."""
    detail = f" ({detail[:200]})" if detail else ""
    if status == 401:
        raise CredentialRejected(
            f"{what} refused the source's credential (HTTP 401{detail}): it was revoked or has expired. "
            "Nothing was changed; give the source a new token."
        )
    if status == 429:
        raise SourceUnreachable(f"{what} kept answering 429 (rate limited) after retries{detail}.")
    if status >= 500:
        raise SourceUnreachable(f"{what} answered HTTP {status} after retries{detail}.")
