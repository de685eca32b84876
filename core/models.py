"""Tenancy: tenants, a user's memberships in them, and membership API tokens.

Every other app's tenant data points at ``Tenant``; which tenant a request acts in is decided in
``core.memberships``. The tables keep the names they had when these models lived in the
``knowledge`` app (``knowledge_tenant``, ``knowledge_membership``, ``knowledge_membershiptoken``),
which the row-level-security policies name.
"""

from __future__ import annotations

from django.conf import settings
from django.db import models

from core.embedder_keys import EMBEDDER_FORMS, LOCAL_EMBEDDER_KEYS, OPENAI_PREFIX
from core.tenancy import TenantScopedQuerySet
from core.tokens import token_key_new


class Tenant(models.Model):
    """A team: the unit of isolation. ``embedder`` names the embedding model its chunks use."""

    slug = models.SlugField(max_length=64, unique=True)
    name = models.CharField(max_length=200)
    embedder = models.CharField(
        max_length=200,
        default="local",
        help_text="'local' (all-MiniLM-L6-v2, 384 dimensions), 'mpnet' (all-mpnet-base-v2, 768) or 'openai:<model>'. "
        "Changing it needs a re-embed.",
    )
    retrieval_config = models.JSONField(
        default=dict,
        blank=True,
        help_text='Overrides of retrieval defaults, e.g. {"fusion": "weighted", "dense_weight": 0.7}.',
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        db_table = "knowledge_tenant"  # the table predates the core app
        constraints = [
            # core.embedder_keys.embedder_key_valid, held by the database
            models.CheckConstraint(
                condition=models.Q(embedder__in=LOCAL_EMBEDDER_KEYS) | models.Q(embedder__regex=rf"^{OPENAI_PREFIX}.+"),
                name="tenant_embedder_known",
                violation_error_message=f"The embedder must be {EMBEDDER_FORMS}.",
            ),
        ]

    def __str__(self) -> str:
        return self.slug


class Membership(models.Model):
    """A user's role in a tenant. A user may belong to several tenants, once each
    (``membership_unique_user_tenant``); which one a request acts in is
    ``core.memberships.membership_for_request``."""

    class Role(models.TextChoices):
        """What a member may do: viewers ask; members also give feedback and keep their history
        (conversations); editors also upload and curate documents; admins and owners also manage
        sources, members and settings."""

        OWNER = "owner", "Owner"
        ADMIN = "admin", "Admin"
        EDITOR = "editor", "Editor"
        MEMBER = "member", "Member"
        VIEWER = "viewer", "Viewer"

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="memberships")
    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="memberships")
    role = models.CharField(max_length=10, choices=Role.choices, default=Role.MEMBER)

    objects = TenantScopedQuerySet.as_manager()

    class Meta:
        db_table = "knowledge_membership"
        constraints = [
            models.UniqueConstraint(fields=["user", "tenant"], name="membership_unique_user_tenant"),
        ]

    def __str__(self) -> str:
        return f"{self.user} @ {self.tenant} ({self.role})"

    @property
    def can_edit(self) -> bool:
        """May upload, change and delete documents."""
        return self.role in (self.Role.OWNER, self.Role.ADMIN, self.Role.EDITOR)

    @property
    def can_participate(self) -> bool:
        """May give feedback and keep a history of conversations (every role but viewer)."""
        return self.role != self.Role.VIEWER


class MembershipTokenQuerySet(TenantScopedQuerySet):
    tenant_path = "membership__tenant"


class MembershipToken(models.Model):
    """An API token of one membership: requests carrying it act in that membership's tenant.

    Only the key's SHA-256 digest is stored (``core.tokens.token_digest``); the key itself is
    shown once, when the token is made (``core.memberships.membership_token_create``).
    """

    membership = models.ForeignKey(Membership, on_delete=models.CASCADE, related_name="tokens")
    name = models.CharField(max_length=100, blank=True, help_text="What the token is for (a script, a bot).")
    digest = models.CharField(max_length=64, unique=True, editable=False)
    prefix = models.CharField(max_length=12, editable=False, help_text="The key's first characters, to recognize it.")
    created_at = models.DateTimeField(auto_now_add=True)
    last_used_at = models.DateTimeField(null=True, blank=True, editable=False)

    objects = MembershipTokenQuerySet.as_manager()

    class Meta:
        db_table = "knowledge_membershiptoken"

    def __str__(self) -> str:
        return f"{self.prefix}… ({self.membership})"

    @classmethod
    def new_key(cls) -> str:
        """A fresh random key: ``kbm_`` and 40 hex digits (160 bits)."""
        return token_key_new()


class AuditEvent(models.Model):
    """One security-relevant action (``core.audit``): who (``actor``, ``actor_label``), in which
    tenant, from which client address, on what object, what changed.

    Append-only: a database trigger refuses every UPDATE and DELETE of its rows (migration
    ``core.0004``), and the app role may only insert and read them. Tenant and actor are kept as
    plain ids (no foreign-key constraint), so the log outlives a deleted user or tenant.
    """

    tenant = models.ForeignKey(
        Tenant, on_delete=models.DO_NOTHING, db_constraint=False, null=True, blank=True, related_name="+"
    )
    actor = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        on_delete=models.DO_NOTHING,
        db_constraint=False,
        null=True,
        blank=True,
        related_name="+",
    )
    actor_label = models.CharField(max_length=200, help_text="The username, or 'operator (CLI)', 'system'.")
    action = models.CharField(max_length=64, help_text="e.g. source.created, signin.failed, token.revoked.")
    object_type = models.CharField(max_length=64, blank=True)
    object_id = models.CharField(max_length=64, blank=True)
    object_repr = models.CharField(max_length=300, blank=True)
    changes = models.JSONField(default=dict, blank=True, help_text='{"field": [before, after]} or details.')
    client_ip = models.GenericIPAddressField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    objects = TenantScopedQuerySet.as_manager()

    class Meta:
        indexes = [
            # GET /api/v1/audit/ and the admin's changelist: a tenant's events, newest first.
            models.Index(fields=["tenant", "-created_at"], name="auditevent_tenant_time"),
        ]

    def __str__(self) -> str:
        return f"{self.created_at:%Y-%m-%d %H:%M:%S} {self.actor_label} {self.action} {self.object_repr}"
