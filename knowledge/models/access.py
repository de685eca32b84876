"""Groups of a tenant's members and the access rules that restrict sources and documents to them.

Imported by ``knowledge.models`` (so they belong to the ``knowledge`` app); ``knowledge.access``
reads and writes them.
"""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.db.models import Q

from core.tenancy import TenantScopedQuerySet
from knowledge.models.documents import Document
from knowledge.models.sources import Source


class AccessGroup(models.Model):
    """A named set of members of one tenant, to grant access to restricted sources and documents.

    Members must belong to the group's tenant (checked by ``knowledge.access.access_group_save``
    and the admin form; a user who leaves the tenant no longer matters, see ``knowledge.access``).
    """

    tenant = models.ForeignKey("core.Tenant", on_delete=models.CASCADE, related_name="access_groups")
    name = models.CharField(max_length=200)
    members = models.ManyToManyField(settings.AUTH_USER_MODEL, blank=True, related_name="access_groups")
    created_at = models.DateTimeField(auto_now_add=True)

    objects = TenantScopedQuerySet.as_manager()

    class Meta:
        verbose_name = "group"
        constraints = [
            models.UniqueConstraint(fields=["tenant", "name"], name="accessgroup_unique_name_per_tenant"),
        ]

    def __str__(self) -> str:
        return f"{self.tenant}/{self.name}"


class AccessRule(models.Model):
    """One grant: ``source`` or ``document`` (exactly one) may be seen by ``group`` or ``user`` (exactly one).

    A source or document with no rule is public to its tenant; one with at least one rule is
    restricted to the groups and users its rules name. A document is visible when both its source
    and the document itself allow the reader (``knowledge.access``).
    """

    tenant = models.ForeignKey("core.Tenant", on_delete=models.CASCADE, related_name="access_rules")
    source = models.ForeignKey(Source, null=True, blank=True, on_delete=models.CASCADE, related_name="access_rules")
    document = models.ForeignKey(Document, null=True, blank=True, on_delete=models.CASCADE, related_name="access_rules")
    group = models.ForeignKey(AccessGroup, null=True, blank=True, on_delete=models.CASCADE, related_name="rules")
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.CASCADE, related_name="access_rules"
    )
    created_at = models.DateTimeField(auto_now_add=True)

    objects = TenantScopedQuerySet.as_manager()

    class Meta:
        verbose_name = "access rule"
        constraints = [
            models.CheckConstraint(
                condition=Q(source__isnull=False, document__isnull=True)
                | Q(source__isnull=True, document__isnull=False),
                name="accessrule_one_target",
            ),
            models.CheckConstraint(
                condition=Q(group__isnull=False, user__isnull=True) | Q(group__isnull=True, user__isnull=False),
                name="accessrule_one_grantee",
            ),
            models.UniqueConstraint(
                fields=["source", "document", "group", "user"], nulls_distinct=False, name="accessrule_unique_grant"
            ),
        ]
        indexes = [
            # retrieval's access condition and the document selectors: a tenant's rules, read whole.
            models.Index(fields=["tenant", "source", "document"], name="accessrule_tenant_target_idx"),
        ]

    def __str__(self) -> str:
        target = f"source {self.source}" if self.source_id else f"document {self.document}"
        grantee = f"group {self.group}" if self.group_id else f"user {self.user}"
        return f"{target} → {grantee}"
