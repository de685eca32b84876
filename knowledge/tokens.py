"""API tokens that belong to one membership, so a request made with one acts in that tenant.

A user's plain DRF token (``rest_framework.authtoken``) names no tenant: with several
memberships the request must name one (``X-Tenant``). A membership token does: its key starts
with ``kbm_`` and only its SHA-256 digest is stored (the key is shown once, when it is made).
"""

from __future__ import annotations

import hashlib
import secrets

from django.db import models

from core.tenancy import TenantScopedQuerySet
from knowledge.models import Membership

KEY_PREFIX = "kbm_"


def token_digest(key: str) -> str:
    """The stored form of a token key: its SHA-256 hex digest (64 characters)."""
    return hashlib.sha256(key.encode()).hexdigest()


class MembershipTokenQuerySet(TenantScopedQuerySet):
    tenant_path = "membership__tenant"


class MembershipToken(models.Model):
    """An API token of one membership: requests carrying it act in that membership's tenant."""

    membership = models.ForeignKey(Membership, on_delete=models.CASCADE, related_name="tokens")
    name = models.CharField(max_length=100, blank=True, help_text="What the token is for (a script, a bot).")
    digest = models.CharField(max_length=64, unique=True, editable=False)
    prefix = models.CharField(max_length=12, editable=False, help_text="The key's first characters, to recognize it.")
    created_at = models.DateTimeField(auto_now_add=True)
    last_used_at = models.DateTimeField(null=True, blank=True, editable=False)

    objects = MembershipTokenQuerySet.as_manager()

    class Meta:
        app_label = "knowledge"

    def __str__(self) -> str:
        return f"{self.prefix}… ({self.membership})"

    @classmethod
    def new_key(cls) -> str:
        """A fresh random key: ``kbm_`` and 40 hex digits (160 bits)."""
        return KEY_PREFIX + secrets.token_hex(20)
