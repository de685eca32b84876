"""The authentication backend a single sign-on session is kept under.

Sign-in itself happens in ``sso.views`` (the provider's verified claims, ``sso.services``), which
calls ``django.contrib.auth.login`` with this backend; this backend only loads the session's user
on later requests. It authenticates nothing by itself, so ``authenticate()`` (the password forms)
never reaches a provider.
"""

from __future__ import annotations

from django.contrib.auth import get_user_model
from django.contrib.auth.backends import BaseBackend

PATH = "sso.backends.OidcBackend"


class OidcBackend(BaseBackend):
    def authenticate(self, request, **credentials):
        return None

    def get_user(self, user_id):
        """The active user ``user_id``, or ``None``."""
        User = get_user_model()
        user = User._default_manager.filter(pk=user_id).first()
        return user if user is not None and user.is_active else None
