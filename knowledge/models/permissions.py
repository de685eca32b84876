"""What service sources say of who may see their documents (``knowledge.permissions``).

``SourcePermissionGroup``: a group of people at the source (a Slack channel's members, a
Confluence space's, a Google group, a GitHub team) with its members' e-mail addresses as the
source gives them, and the ``AccessGroup`` of the product it fills with the tenant's members
who have those addresses. ``DocumentPermission``: a synced document's readers as the source
gives them. Addresses of people who are not (yet) members are kept, so a person who joins the
tenant later is granted at the next permission sync.
"""

from __future__ import annotations

from django.db import models

from core.tenancy import TenantScopedQuerySet


class SourcePermissionGroup(models.Model):
    """A source's group (``knowledge.connectors.base.SourceGroup``) and the access group it fills."""

    tenant = models.ForeignKey("core.Tenant", on_delete=models.CASCADE, related_name="+")
    source = models.ForeignKey("knowledge.Source", on_delete=models.CASCADE, related_name="permission_groups")
    external_id = models.CharField(max_length=500, help_text="The source's own id of the group (a channel id...).")
    name = models.CharField(max_length=200, help_text="As the source names it, prefixed by the kind.")
    emails = models.JSONField(default=list, blank=True, help_text="Its members' addresses at the source, lower case.")
    access_group = models.OneToOneField("knowledge.AccessGroup", on_delete=models.CASCADE, related_name="source_group")
    updated_at = models.DateTimeField(auto_now=True)

    objects = TenantScopedQuerySet.as_manager()

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["source", "external_id"], name="sourcepermissiongroup_unique_per_source"),
        ]

    def __str__(self) -> str:
        return self.name


class DocumentPermission(models.Model):
    """Who may see one synced document at its source (``knowledge.connectors.base.Permission``).

    ``readable`` false: the source's permission could not be read, so the document is visible to
    the tenant's admins only (fail closed). ``public``: anyone in the organisation, so the whole
    tenant. Otherwise the addresses in ``emails`` and the members of the source groups whose
    ``external_id`` is in ``groups``.
    """

    tenant = models.ForeignKey("core.Tenant", on_delete=models.CASCADE, related_name="+")
    document = models.OneToOneField("knowledge.Document", on_delete=models.CASCADE, related_name="source_permission")
    readable = models.BooleanField(default=True)
    public = models.BooleanField(default=False)
    emails = models.JSONField(default=list, blank=True)
    groups = models.JSONField(default=list, blank=True)
    updated_at = models.DateTimeField(auto_now=True)

    objects = TenantScopedQuerySet.as_manager()

    class Meta:
        constraints = [
            models.CheckConstraint(
                condition=models.Q(readable=True) | models.Q(public=False),
                name="documentpermission_unreadable_not_public",
            ),
        ]

    def __str__(self) -> str:
        return f"permission of {self.document_id}"
