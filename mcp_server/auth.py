"""Who an MCP client is: a membership token (``core.tokens``, ``kbm_…``), and the REST API's rate
limit for them.

Over HTTP the key comes in ``Authorization: Bearer <key>`` (``Token <key>``, the REST API's
spelling, works too); over stdio it is the command's ``--token``. Only membership tokens are
taken: one names its tenant and its member, whose role and access groups decide what every tool
may see. A user's plain API token names no tenant and is refused with a message saying so.
"""

from __future__ import annotations

from types import SimpleNamespace

from rest_framework.throttling import UserRateThrottle

from core.errors import ApplicationError
from core.memberships import membership_token_authenticate
from core.models import MembershipToken
from core.tokens import KEY_PREFIX


class NotAuthenticated(ApplicationError):
    """No key, or a key that is not a live membership token of an active user."""

    code = "not_authenticated"
    status = 401


class Throttled(ApplicationError):
    """Over the REST API's per-user rate (``KB_API_RATE``); ``wait`` is in seconds."""

    code = "throttled"
    status = 429

    def __init__(self, wait: float | None):
        self.wait = wait
        seconds = f" Try again in {max(1, round(wait))} seconds." if wait is not None else ""
        super().__init__(f"Too many requests for this user (the API's rate limit).{seconds}")


def key_from_header(value: str | None) -> str:
    """The key of an ``Authorization`` header value (``Bearer <key>`` or ``Token <key>``).
    ``NotAuthenticated`` when there is none or the scheme is another."""
    if not value:
        raise NotAuthenticated(
            "Authentication required: send 'Authorization: Bearer <key>' with a membership token "
            "(manage.py membershiptoken TENANT USER)."
        )
    scheme, _, key = value.strip().partition(" ")
    if scheme.lower() not in ("bearer", "token") or not key.strip():
        raise NotAuthenticated("Use 'Authorization: Bearer <key>' with a membership token.")
    return key.strip()


def token_for_key(key: str) -> MembershipToken:
    """The membership token ``key``, with its membership, tenant and user loaded.

    ``NotAuthenticated`` for a key that is not a membership token (a user's plain API token
    included), an unknown or revoked one, or one whose user is inactive.
    """
    key = (key or "").strip()
    if not key.startswith(KEY_PREFIX):
        raise NotAuthenticated(
            f"Not a membership token: the MCP server takes a token of one membership ('{KEY_PREFIX}…', "
            "from manage.py membershiptoken or the admin), which names its tenant."
        )
    token = membership_token_authenticate(key)
    if token is None:
        raise NotAuthenticated("Invalid token: it does not exist or was revoked.")
    if not token.membership.user.is_active:
        raise NotAuthenticated("User inactive or deleted.")
    return token


def rate_limit_check(request=None, *, user=None) -> None:
    """Count one request of ``request.user`` (or ``user``) against the REST API's per-user rate
    (DRF's ``UserRateThrottle``, the same cache key as the REST API, so both share one budget).
    ``Throttled`` when over it."""
    throttle = UserRateThrottle()
    if not throttle.allow_request(request if request is not None else SimpleNamespace(user=user), None):
        raise Throttled(throttle.wait())
