"""The HTTP side of the GitHub connector: a PyGithub client whose every request goes through the
address guard, with GitHub's rate limits waited out, and GitHub's errors as the connector's.

PyGithub's ``Requester`` opens its connections with connection classes whose requests session
it builds itself. ``github_client`` gives the client's own ``Requester`` (not PyGithub's class, so
nothing else changes) connection classes whose session is ``guarded_session``, retried by
``GitHubRetry``: PyGithub's ``GithubRetry`` (a urllib3 ``Retry`` that also retries GitHub's 403
rate-limit answers, waiting for ``Retry-After`` or ``X-RateLimit-Reset``) with ``retry_policy``'s
tries and backoff. A pause longer than ``MAX_RETRY_AFTER_S`` fails the call instead of waiting.
"""

from __future__ import annotations

from contextlib import contextmanager

from django.conf import settings
from github import Auth, Github, GithubException, GithubRetry, RateLimitExceededException
from github.Requester import HTTPRequestsConnectionClass, HTTPSRequestsConnectionClass

from core.outbound import AddressNotAllowed
from knowledge.connectors.base import CredentialRejected, SourceUnreachable
from knowledge.connectors.http import (
    MAX_RETRY_AFTER_S,
    RETRY_STATUSES,
    RetryAfterCap,
    guarded_session,
    retry_policy,
    status_raise,
)

PAGE = 100  # items per page: the REST API's maximum
SECONDARY_RATE_WAIT_S = 60  # a 403 "secondary rate limit" without Retry-After: GitHub's advice


class GitHubRetry(RetryAfterCap, GithubRetry):
    """PyGithub's ``GithubRetry`` (403 rate limits retried too) that refuses to wait longer than
    ``MAX_RETRY_AFTER_S``: a longer ``Retry-After`` raises ``SourceUnreachable``."""

    service = "GitHub"


def github_retry() -> GitHubRetry:
    """``GitHubRetry`` with ``retry_policy``'s tries and backoff (``KB_CONNECTOR_*`` settings)."""
    return retry_policy(
        GitHubRetry,
        status_forcelist=list(RETRY_STATUSES),  # GithubRetry adds 403, retried when it is a rate limit
        secondary_rate_wait=SECONDARY_RATE_WAIT_S,
        max_rate_limit_wait=MAX_RETRY_AFTER_S,
    )


def _guarded(connection):
    """Give a PyGithub connection ``guarded_session`` with the connection's own ``Retry``."""
    connection.session.close()
    connection.session = guarded_session(timeout=connection.timeout)
    for prefix in ("http://", "https://"):
        connection.session.get_adapter(prefix).max_retries = connection.retry
    return connection


class GuardedHTTPConnection(HTTPRequestsConnectionClass):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        _guarded(self)


class GuardedHTTPSConnection(HTTPSRequestsConnectionClass):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        _guarded(self)


def github_client(location: str, token: str) -> Github:
    """A PyGithub client for the API at ``location`` whose every connection is guarded.

    ``RuntimeError`` if PyGithub's ``Requester`` no longer takes its connection classes where this
    expects (a newer release): better no request than an unguarded one.
    """
    client = Github(
        base_url=location.rstrip("/"),
        auth=Auth.Token(token),
        retry=github_retry(),
        per_page=PAGE,
        timeout=int(settings.KB_CONNECTOR_TIMEOUT_S),
        seconds_between_requests=None,  # requests are sequential; rate limits are answered by the retry
        seconds_between_writes=None,
        user_agent="knowledge-base-connector",
    )
    requester = client.requester
    hooks = ("_Requester__connectionClass", "_Requester__httpConnectionClass", "_Requester__httpsConnectionClass")
    if not all(hasattr(requester, name) for name in hooks):
        raise RuntimeError("PyGithub's Requester changed: its connections cannot be guarded.")
    secure = location.lower().startswith("https://")
    requester._Requester__connectionClass = GuardedHTTPSConnection if secure else GuardedHTTPConnection
    requester._Requester__httpConnectionClass = GuardedHTTPConnection
    requester._Requester__httpsConnectionClass = GuardedHTTPSConnection
    return client


def _message(exc: GithubException) -> str:
    data = exc.data if isinstance(exc.data, dict) else {}
    return str(data.get("message") or "")


def rate_limited(exc: GithubException) -> bool:
    headers = {k.lower(): v for k, v in (exc.headers or {}).items()}
    return (
        isinstance(exc, RateLimitExceededException)
        or exc.status == 429
        or (exc.status == 403 and str(headers.get("x-ratelimit-remaining")) == "0")
    )


def _status_error(status: int, what: str, message: str) -> SourceUnreachable | None:
    """``status_raise``'s error for ``status`` (401, 429, 5xx), returned; None for another status."""
    try:
        status_raise(status, what=f"GitHub (reading {what})", detail=message)
    except SourceUnreachable as error:
        return error
    return None


def github_error(exc: GithubException, what: str) -> SourceUnreachable:
    """The connector error for GitHub's answer ``exc`` to a request for ``what`` (after retries)."""
    message = _message(exc)
    if rate_limited(exc):
        return SourceUnreachable(
            f"GitHub kept answering {what} with its rate limit (HTTP {exc.status}) after retries; "
            "the next sync resumes where this one stopped."
        )
    if exc.status == 403:
        return CredentialRejected(
            f"GitHub refused the token for {what} (HTTP 403: {message[:200]}): it lacks a permission "
            "(Issues, Pull requests and Metadata: read) or the organisation's SSO has not authorised it."
        )
    if exc.status == 404:
        return SourceUnreachable(
            f"GitHub answered HTTP 404 for {what}: it does not exist or this token cannot see it.", code="not_found"
        )
    return _status_error(exc.status, what, message) or SourceUnreachable(
        f"GitHub answered {what} with HTTP {exc.status} ({message[:200]})."
    )


@contextmanager
def answers(what: str):
    """Turn what PyGithub and requests raise while reading ``what`` into the connector's errors."""
    import requests

    try:
        yield
    except GithubException as exc:
        raise github_error(exc, what) from exc
    except AddressNotAllowed as exc:
        raise SourceUnreachable(f"GitHub at this location may not be reached: {exc.message}") from exc
    except requests.RequestException as exc:
        raise SourceUnreachable(f"GitHub could not be reached for {what} ({type(exc).__name__}).") from exc
