"""The HTTP layer of the service connectors: the outbound address guard, retries and clear errors.

Every request a service connector makes for a tenant connects through ``core.outbound.connect``
(public addresses only, unless the operator's ``KB_FETCH_ALLOWED_NETWORKS`` opens an intranet
range for a self-hosted server), with no proxy from the environment.

Retries are urllib3's ``Retry`` (a well-kept library, not our own loop): a 429 or 503 with
``Retry-After`` waits what the service asks (at most ``MAX_RETRY_AFTER_S``), other 5xx answers
and dropped connections are retried with exponential backoff, ``KB_CONNECTOR_RETRIES`` times.
``retry_caps`` is the one place those limits are read; connectors whose client library has its
own retry loop (Slack, Notion, GitHub's ``GithubRetry``) take theirs from it too.

``guarded_session`` serves the clients built on ``requests`` (atlassian-python-api, jira,
PyGithub); ``guarded_pool`` the ones that take a urllib3 pool. ``response_raise`` turns the
last answer into ``CredentialRejected`` (401, 403 on the token itself) or ``SourceUnreachable``.
"""

from __future__ import annotations

from dataclasses import dataclass

from django.conf import settings
from urllib3.util.retry import Retry

from core.outbound import guarded_pool_manager
from knowledge.connectors.base import CredentialRejected, SourceUnreachable

# A service asking for a longer pause than this fails the run (it resumes at the next sync).
MAX_RETRY_AFTER_S = 120
# The longest pause of the exponential backoff between two tries, in seconds.
MAX_BACKOFF_S = 30.0
RETRY_STATUSES = (429, 500, 502, 503, 504)
# The most a single response may read (a page of a listing, an attachment), before decoding.
MAX_RESPONSE_BYTES = 64 * 1024 * 1024


@dataclass(frozen=True)
class RetryCaps:
    """How hard a connector tries: ``retries`` more tries after a failed one, with pauses growing
    as ``backoff_s`` x 2^n seconds (n = 0, 1, ...; at most ``MAX_BACKOFF_S``), and a
    ``Retry-After`` waited out only up to ``MAX_RETRY_AFTER_S``."""

    retries: int
    backoff_s: float

    def backoff(self, attempt: int) -> float:
        """Seconds to pause after failed try ``attempt`` (0 for the first), without jitter."""
        return min(self.backoff_s * 2**attempt, MAX_BACKOFF_S)

    def waits_for(self, retry_after: float | None) -> bool:
        """Whether a ``Retry-After`` of ``retry_after`` seconds (``None``: none given) is waited out."""
        return retry_after is None or retry_after <= MAX_RETRY_AFTER_S

    def retry_after_refuse(self, retry_after: float | None, *, service: str = "The service") -> None:
        """Raise ``SourceUnreachable`` when ``service`` asked to wait longer than ``waits_for``
        allows (the next sync resumes from its checkpoint); else nothing."""
        if not self.waits_for(retry_after):
            raise SourceUnreachable(
                f"{service} asked to wait {retry_after:.0f} s before the next request (rate limited); "
                "the next sync resumes where this one stopped."
            )


def retry_caps() -> RetryCaps:
    """The connectors' ``RetryCaps`` from ``KB_CONNECTOR_RETRIES`` and ``KB_CONNECTOR_BACKOFF_S``
    (read at each call, so a changed setting applies to the next client built)."""
    return RetryCaps(retries=settings.KB_CONNECTOR_RETRIES, backoff_s=settings.KB_CONNECTOR_BACKOFF_S)


class RetryAfterCap:
    """For a urllib3 ``Retry`` subclass (``class MyRetry(RetryAfterCap, Retry)``): a
    ``Retry-After`` longer than ``MAX_RETRY_AFTER_S`` raises ``SourceUnreachable`` (naming
    ``service``) instead of waiting."""

    service = "The service"

    def sleep_for_retry(self, response) -> bool:
        """urllib3's pause before the next try, refused for a ``Retry-After`` over the cap."""
        retry_caps().retry_after_refuse(self.get_retry_after(response), service=self.service)
        return super().sleep_for_retry(response)


class CappedRetry(RetryAfterCap, Retry):
    """urllib3's ``Retry`` with the ``Retry-After`` cap (``RetryAfterCap``)."""


def retry_policy(retry_class: type[Retry] = CappedRetry, **options) -> Retry:
    """urllib3 ``Retry``: ``KB_CONNECTOR_RETRIES`` tries on 429/5xx and dropped connections,
    honouring ``Retry-After`` up to ``MAX_RETRY_AFTER_S`` (a longer wait raises
    ``SourceUnreachable``: the next sync resumes from its checkpoint), backoff
    ``KB_CONNECTOR_BACKOFF_S`` x 2^n (capped at ``MAX_BACKOFF_S``).

    ``retry_class`` (a ``RetryAfterCap`` subclass of ``Retry``, e.g. GitHub's) is built with these
    limits and its own ``options`` on top."""
    caps = retry_caps()
    limits = {
        "total": caps.retries,
        "connect": caps.retries,
        "read": caps.retries,
        "status": caps.retries,
        "status_forcelist": RETRY_STATUSES,
        "allowed_methods": None,  # every method: the connectors only read (GraphQL and search are POSTs)
        "backoff_factor": caps.backoff_s,
        "backoff_max": MAX_BACKOFF_S,
        "respect_retry_after_header": True,
        "raise_on_status": False,  # the last answer reaches the client, which says what went wrong
    }
    return retry_class(**{**limits, **options})


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
