"""DRF authentication by API token: a membership token (``kbm_…``, acting in its tenant) or a
user's plain DRF token (acting in the tenant the request names, see ``core.memberships``)."""

from __future__ import annotations

from rest_framework import exceptions
from rest_framework.authentication import TokenAuthentication

from core.memberships import membership_token_authenticate
from core.tokens import KEY_PREFIX


class MembershipTokenAuthentication(TokenAuthentication):
    """``Authorization: Token <key>``. A ``kbm_`` key is looked up among membership tokens and
    ``request.auth`` becomes the ``MembershipToken``; any other key is DRF's user token."""

    def authenticate_credentials(self, key):
        if not key.startswith(KEY_PREFIX):
            return super().authenticate_credentials(key)
        token = membership_token_authenticate(key)
        if token is None:
            raise exceptions.AuthenticationFailed("Invalid token.")
        user = token.membership.user
        if not user.is_active:
            raise exceptions.AuthenticationFailed("User inactive or deleted.")
        return user, token
