"""Single sign-on with OpenID Connect: each tenant's provider and claim mapping, and the link
between a provider's account (issuer and subject) and a user here.

Only the operator writes ``TenantSso`` (the superuser admin, ``manage.py sso``): its issuer
decides which server this server fetches from. See ``docs/sso.md``.
"""

from __future__ import annotations

from django.conf import settings
from django.db import models

from core.models import Membership, Tenant
from core.secrets import EncryptedTextField
from core.tenancy import TenantScopedQuerySet

DEFAULT_SCOPES = "openid email profile"


class TenantSso(models.Model):
    """A tenant's single sign-on: its own OpenID Connect provider (``issuer``, ``client_id``,
    ``client_secret``), or, with ``issuer`` left empty, the installation's (``KB_OIDC_*``); and
    how the provider's claims map to the tenant's membership and access groups."""

    tenant = models.OneToOneField(Tenant, on_delete=models.CASCADE, related_name="sso")
    enabled = models.BooleanField(default=True)
    name = models.CharField(
        max_length=100, blank=True, help_text='The button reads "Sign in with <name>". Empty: the issuer\'s host.'
    )
    issuer = models.CharField(
        max_length=500,
        blank=True,
        help_text="The provider's issuer URL (its discovery document is <issuer>/.well-known/openid-configuration). "
        "Empty: this tenant uses the installation's provider (KB_OIDC_ISSUER).",
    )
    client_id = models.CharField(max_length=255, blank=True)
    # Sent to the provider's token endpoint only; stored encrypted (core.secrets), never shown (the
    # admin's field is write-only).
    client_secret = EncryptedTextField(blank=True)
    scopes = models.CharField(max_length=255, default=DEFAULT_SCOPES, help_text="Space-separated; must include openid.")
    role_claim = models.CharField(
        max_length=100,
        blank=True,
        help_text="The claim holding the user's roles or groups at the provider (a dotted path such as "
        "realm_access.roles). Empty: new memberships get the default role and existing ones keep theirs.",
    )
    role_values = models.JSONField(
        default=dict,
        blank=True,
        help_text='Claim values to roles, e.g. {"kb-admins": "admin", "kb-editors": "editor"}; the highest role '
        "matched wins, none matched gives the default role.",
    )
    default_role = models.CharField(max_length=10, choices=Membership.Role.choices, default=Membership.Role.MEMBER)
    groups_claim = models.CharField(
        max_length=100,
        blank=True,
        help_text="The claim listing the user's groups: at each sign-in the user is put in the tenant's access "
        "groups of those names and taken out of the others. Empty: access groups are left alone.",
    )
    create_memberships = models.BooleanField(
        default=False,
        help_text="Give a membership (and, if needed, an account) to whoever signs in through this provider "
        "without one. Off: only existing members may sign in.",
    )
    # Operator only, like every field here: whether this tenant's provider may vouch for an account
    # that belongs to other tenants too (sso.services).
    allow_other_tenants_members = models.BooleanField(
        default=False,
        help_text="Let this provider sign in (and link by verified email) accounts that are also members of other "
        "tenants, e.g. several tenants of one organisation on one provider. Signed in this way they act in this "
        "tenant only. Off: such accounts sign in with their password or the installation's provider.",
    )
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    objects = TenantScopedQuerySet.as_manager()

    class Meta:
        verbose_name = "tenant single sign-on"
        verbose_name_plural = "tenant single sign-on"
        constraints = [
            # A provider of the tenant's own names its client; one left empty uses the installation's.
            models.CheckConstraint(
                condition=models.Q(issuer="") | ~models.Q(client_id=""),
                name="tenantsso_own_provider_has_client",
                violation_error_message="A provider of the tenant's own needs a client id.",
            ),
        ]

    def __str__(self) -> str:
        return f"single sign-on of {self.tenant}"

    @property
    def uses_installation_provider(self) -> bool:
        """Whether the tenant signs in through the installation's provider (no issuer of its own)."""
        return not self.issuer


class Identity(models.Model):
    """A provider's account, named by its issuer and subject (the ``iss`` and ``sub`` claims of a
    verified ID token), signed in as ``user``. Made at the account's first sign-in.

    The link belongs to the provider that made it: ``tenant`` is the tenant whose own provider
    linked it (``None``: the installation's provider), and only that provider signs in through it.
    Another tenant's provider with the same issuer never reaches the account through this row."""

    tenant = models.ForeignKey(
        Tenant,
        null=True,
        blank=True,
        on_delete=models.CASCADE,
        related_name="sso_identities",
        help_text="The tenant whose provider linked the account; empty: the installation's provider.",
    )
    issuer = models.CharField(max_length=500)
    subject = models.CharField(max_length=255)
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="sso_identities")
    created_at = models.DateTimeField(auto_now_add=True)
    last_signed_in_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        verbose_name_plural = "identities"
        constraints = [
            # One account here per provider account and tenant (the installation's provider's links,
            # with no tenant, count as one tenant); the sign-in's lookup uses its index.
            models.UniqueConstraint(
                fields=["issuer", "subject", "tenant"],
                name="identity_unique_issuer_subject_tenant",
                nulls_distinct=False,
            ),
        ]

    def __str__(self) -> str:
        return f"{self.subject} at {self.issuer} -> {self.user}"
