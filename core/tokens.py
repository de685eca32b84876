"""Keys of membership API tokens (the model is ``core.models.MembershipToken``).

A user's plain DRF token (``rest_framework.authtoken``) names no tenant: with several
memberships the request must name one (``X-Tenant``). A membership token does: its key starts
with ``kbm_`` and only its SHA-256 digest is stored (the key is shown once, when it is made).
"""

from __future__ import annotations

import hashlib
import secrets

KEY_PREFIX = "kbm_"


def token_digest(key: str) -> str:
    """The stored form of a token key: its SHA-256 hex digest (64 characters)."""
    return hashlib.sha256(key.encode()).hexdigest()


def token_key_new() -> str:
    """A fresh random key: ``kbm_`` and 40 hex digits (160 bits)."""
    return KEY_PREFIX + secrets.token_hex(20)
