"""Permissions that follow the source: service sources' readers as access groups and rules.

A service connector (``knowledge.connectors.services``) says who may see each document at the
source (``Permission``) and who is in each of the source's groups (``SourceGroup``). This module
turns that into the product's own access control (``knowledge.access``), which every query path
already applies (search, ask, MCP, facts, walks, citations, row-level security underneath):

* each source group becomes an ``AccessGroup`` named as the connector names it
  (``slack:#secret-plans``), whose members are the tenant's members with one of the group's
  e-mail addresses (case-insensitive). Addresses of people who are not members are kept
  (``SourcePermissionGroup.emails``), so a person who joins later is added at the next
  permission sync;
* a public document (anyone in the organisation) has no rule: the whole tenant sees it;
* any other document is restricted: a rule for the source's empty "no readers" group (so it
  stays restricted when none of its readers is a member yet), one per group it names and one per
  member whose address it names;
* a document whose permission could not be read has only the "no readers" rule: the tenant's
  owners and admins see it, nobody else (fail closed).

Rules are diffed and written in bulk, in the caller's transaction, and recorded in the audit log
once per sync (``source.permissions_synced``), not once per rule.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from django.contrib.auth import get_user_model
from django.db import transaction
from django.db.models.functions import Lower

from core.models import Membership
from knowledge.connectors.base import Permission, SourceGroup
from knowledge.models import AccessGroup, AccessRule, Document, DocumentPermission, Source, SourcePermissionGroup

NO_READERS = "__no_readers__"  # the external id of each service source's empty group


@dataclass
class PermissionCounts:
    """What a permission sync did: groups synced, documents public / restricted / unreadable,
    rules added and removed."""

    groups: int = 0
    public: int = 0
    restricted: int = 0
    unreadable: int = 0
    rules_added: int = 0
    rules_removed: int = 0
    unmapped_emails: set[str] = field(default_factory=set)

    def as_dict(self) -> dict:
        """For ``SyncRun.permissions``: the counts, and how many source users are not members yet."""
        return {
            "groups": self.groups,
            "public": self.public,
            "restricted": self.restricted,
            "unreadable": self.unreadable,
            "rules_added": self.rules_added,
            "rules_removed": self.rules_removed,
            "source_users_not_members": len(self.unmapped_emails),
        }


def members_by_email(tenant_id: int) -> dict[str, int]:
    """The tenant's members as ``{lower-case e-mail: user id}`` (users without an address left out)."""
    users = (
        get_user_model()
        .objects.filter(pk__in=Membership.objects.for_tenant(tenant_id).values("user_id"))
        .exclude(email="")
    )
    return {email: pk for email, pk in users.annotate(lower=Lower("email")).values_list("lower", "pk")}


def _group_name(source: Source, wanted: str) -> str:
    """``wanted`` as an access group name free in the tenant (another source's group of the same
    name gets the source's name after it)."""
    wanted = wanted[:150]
    taken = AccessGroup.objects.for_tenant(source.tenant_id).filter(name=wanted).exclude(source_group__source=source)
    return f"{wanted} ({source.name})"[:200] if taken.exists() else wanted


def _group_upsert(source: Source, external_id: str, name: str, emails: list[str]) -> SourcePermissionGroup:
    row = SourcePermissionGroup.objects.filter(source=source, external_id=external_id).select_related("access_group")
    row = row.first()
    if row is None:
        access_group = AccessGroup.objects.create(tenant_id=source.tenant_id, name=_group_name(source, name))
        return SourcePermissionGroup.objects.create(
            tenant_id=source.tenant_id,
            source=source,
            external_id=external_id,
            name=name,
            emails=emails,
            access_group=access_group,
        )
    if row.name != name or row.emails != emails:
        row.name, row.emails = name, emails
        row.save(update_fields=["name", "emails", "updated_at"])
        if row.access_group.name != name and not row.access_group.name.startswith(name):
            row.access_group.name = _group_name(source, name)
            row.access_group.save(update_fields=["name"])
    return row


def no_readers_group(source: Source) -> SourcePermissionGroup:
    """The source's empty group, which keeps a document with no member among its readers restricted."""
    return _group_upsert(source, NO_READERS, f"{source.kind}:{source.name}: no readers", [])


def groups_sync(
    *,
    source: Source,
    groups: Iterable[SourceGroup],
    counts: PermissionCounts,
    members: Mapping[str, int] | None = None,
) -> dict[str, int]:
    """Bring the source's groups in line with ``groups`` (the connector's, complete): new ones
    made, members set to the tenant members with their addresses, groups gone at the source
    deleted (with their rules). Returns ``{external_id: access group id}`` (what ``rules_apply``
    takes as ``group_ids``). ``members`` is ``members_by_email`` of the source's tenant when the
    caller read it already (a sync reads it once per run); read here otherwise."""
    members = members_by_email(source.tenant_id) if members is None else members
    seen: dict[str, int] = {}
    for group in groups:
        emails = sorted(group.emails)
        row = _group_upsert(source, group.external_id, group.name, emails)
        wanted = {members[e] for e in emails if e in members}
        counts.unmapped_emails.update(e for e in emails if e not in members)
        current = set(row.access_group.members.values_list("pk", flat=True))
        if wanted != current:
            row.access_group.members.remove(*(current - wanted))
            row.access_group.members.add(*(wanted - current))
        seen[group.external_id] = row.access_group_id
        counts.groups += 1
    seen[NO_READERS] = no_readers_group(source).access_group_id
    gone = SourcePermissionGroup.objects.filter(source=source).exclude(external_id__in=list(seen))
    AccessGroup.objects.filter(pk__in=gone.values("access_group_id")).delete()  # their rules go with them
    return seen


def source_group_ids(source: Source) -> dict[str, int]:
    """``{external_id: access group id}`` of the source's groups as last synced (the empty group made)."""
    ids = dict(SourcePermissionGroup.objects.filter(source=source).values_list("external_id", "access_group_id"))
    if NO_READERS not in ids:
        ids[NO_READERS] = no_readers_group(source).access_group_id
    return ids


def permissions_store(*, source: Source, permissions: Mapping[int, Permission | None]) -> None:
    """Keep ``permissions`` (``{document id: Permission or None}``; None: unreadable) for the
    source's documents, replacing what was kept."""
    if not permissions:
        return
    rows = [
        DocumentPermission(
            tenant_id=source.tenant_id,
            document_id=document_id,
            readable=permission is not None,
            public=bool(permission and permission.public),
            emails=sorted(permission.emails) if permission else [],
            groups=sorted(permission.groups) if permission else [],
        )
        for document_id, permission in permissions.items()
    ]
    DocumentPermission.objects.bulk_create(
        rows,
        update_conflicts=True,
        unique_fields=["document"],
        update_fields=["readable", "public", "emails", "groups", "updated_at"],
        batch_size=1000,
    )


def rules_apply(
    *,
    source: Source,
    document_ids: Iterable[int] | None = None,
    counts: PermissionCounts | None = None,
    members: Mapping[str, int] | None = None,
    group_ids: Mapping[str, int] | None = None,
) -> PermissionCounts:
    """Write the access rules of the source's documents (all, or ``document_ids``) from their kept
    permissions (module docstring), adding and removing only what differs. A document with no
    kept permission is treated as unreadable (fail closed).

    ``members`` (``members_by_email`` of the source's tenant) and ``group_ids``
    (``source_group_ids`` or ``groups_sync``'s result, holding ``NO_READERS``) are read here when
    not given; a sync reads them once per run and passes them to every batch.
    """
    counts = counts or PermissionCounts()
    group_ids = source_group_ids(source) if group_ids is None else group_ids
    members = members_by_email(source.tenant_id) if members is None else members
    documents = Document.objects.for_tenant(source.tenant_id).filter(source=source, deleted_at__isnull=True)
    if document_ids is not None:
        documents = documents.filter(pk__in=list(document_ids))
    ids = list(documents.values_list("pk", flat=True))
    kept = {
        p["document_id"]: p
        for p in DocumentPermission.objects.filter(document_id__in=ids).values(
            "document_id", "readable", "public", "emails", "groups"
        )
    }
    wanted: dict[int, set[tuple[str, int]]] = {}
    for document_id in ids:
        permission = kept.get(document_id)
        if permission is None or not permission["readable"]:
            counts.unreadable += 1
            wanted[document_id] = {("group", group_ids[NO_READERS])}
            continue
        if permission["public"]:
            counts.public += 1
            wanted[document_id] = set()
            continue
        counts.restricted += 1
        grants = {("group", group_ids[NO_READERS])}
        grants.update(("group", group_ids[g]) for g in permission["groups"] if g in group_ids)
        for email in permission["emails"]:
            if email in members:
                grants.add(("user", members[email]))
            else:
                counts.unmapped_emails.add(email)
        wanted[document_id] = grants
    current: dict[int, dict[tuple[str, int], int]] = defaultdict(dict)
    for rule_id, document_id, group_id, user_id in AccessRule.objects.filter(document_id__in=ids).values_list(
        "pk", "document_id", "group_id", "user_id"
    ):
        current[document_id][("group", group_id) if group_id else ("user", user_id)] = rule_id
    to_delete: list[int] = []
    to_add: list[AccessRule] = []
    for document_id, grants in wanted.items():
        have = current.get(document_id, {})
        to_delete.extend(rule_id for grant, rule_id in have.items() if grant not in grants)
        for kind, grantee in grants - set(have):
            to_add.append(
                AccessRule(
                    tenant_id=source.tenant_id,
                    document_id=document_id,
                    group_id=grantee if kind == "group" else None,
                    user_id=grantee if kind == "user" else None,
                )
            )
    with transaction.atomic():
        if to_delete:
            AccessRule.objects.filter(pk__in=to_delete).delete()
        AccessRule.objects.bulk_create(to_add, batch_size=1000, ignore_conflicts=True)
    counts.rules_added += len(to_add)
    counts.rules_removed += len(to_delete)
    return counts
