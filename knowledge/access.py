"""Who may see what: groups, access rules on sources and documents, and a user's ``AccessScope``.

Rules (``knowledge.models.AccessRule``): a source or document with no rule is **public** to its
tenant; one with at least one rule is **restricted** to the groups and users its rules name. A
document is visible when its source allows the reader *and* the document allows the reader
(a rule on a document narrows, never widens, its source's rule).

Who bypasses: the tenant's **owners and admins** see every document of their tenant (they
manage the rules and could grant themselves anyway, and the admin site shows them the whole
tenant), and so do Django **superusers**, except the files members attach to their conversations:
those are their member's alone (``knowledge.attachments``). Editors, members and viewers are bound
by the rules. A user who is not a member of the tenant may not ask in it at all
(``PermissionDenied``).

The rules are read when a query starts (``access_scope_get``: one SQL query giving the versions
of the documents hidden from the user), never copied onto chunks: retrieval applies
``AccessScope.chunk_parts``/``denied_condition`` inside the SQL of both retrievers (through
``retrieval.filters.RetrievalFilter``), and the document selectors apply
``documents_visible``/``sources_visible``, so changing a rule or a group takes effect on the next
query, with no re-indexing.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from django.contrib.auth import get_user_model
from django.db import connection, transaction
from django.db.models import Count, Q, QuerySet
from psycopg import sql

from core.audit import audit_fields_diff, audit_record
from core.errors import InvalidInput, NotFound, PermissionDenied
from core.models import Membership, Tenant
from knowledge.models import AccessGroup, AccessRule, Document, Source

BYPASS_ROLES = (Membership.Role.OWNER, Membership.Role.ADMIN)


@dataclass(frozen=True)
class AccessScope:
    """What one user may see in one tenant, read from the rules when the query starts.

    ``user_id`` and ``group_ids`` (the tenant's groups the user is in) were matched against the
    rules; ``sees_all`` is true for owners, admins and superusers; ``has_rules`` is whether the
    tenant has any rule at all; ``denied_versions`` are the ids of every version of the documents
    hidden from the user (empty for ``sees_all``, or when every restricted document is granted).
    """

    tenant_id: int
    user_id: int
    group_ids: tuple[int, ...] = field(default=())
    sees_all: bool = False
    has_rules: bool = True
    denied_versions: tuple[int, ...] = field(default=(), repr=False)

    @property
    def restricts(self) -> bool:
        """True when some of the tenant's documents are hidden from this user."""
        return not self.sees_all and bool(self.denied_versions)

    def params(self) -> dict:
        """The named parameters of ``chunk_parts`` and ``denied_condition`` (besides ``filter_tenant``)."""
        return {"access_denied": list(self.denied_versions)}

    def chunk_parts(self, chunk: sql.Identifier) -> list[sql.Composable]:
        """SQL conditions on ``knowledge_chunk AS chunk`` keeping only the chunks this user may see.

        ``version_id <> ALL(<denied version ids>)``: an array of constants, which PostgreSQL (15+)
        probes through a hash table, so each candidate chunk costs one lookup.
        """
        if not self.restricts:
            return []
        return [sql.SQL("{}.version_id <> ALL(%(access_denied)s::bigint[])").format(chunk)]

    def denied_condition(self, chunk: sql.Identifier) -> sql.Composed:
        """The SQL condition on ``knowledge_chunk AS chunk`` true for the chunks hidden from this user
        (the complement of ``chunk_parts`` among the tenant's chunks); found through the chunk's
        version index."""
        # No tenant test: the denied versions are the tenant's (access_scope_get), and leaving it out
        # lets PostgreSQL answer from chunk_version_incl_id_idx alone (an index-only scan).
        return sql.SQL("{}.version_id = ANY(%(access_denied)s::bigint[])").format(chunk)

    def summary(self) -> dict:
        """For traces: who asked, which groups counted, whether anything was hidden (no counts)."""
        if self.sees_all:
            return {"user": self.user_id, "sees_all": True}
        return {"user": self.user_id, "groups": list(self.group_ids), "restricted": self.restricts}


# Rules of the tenant (%(t)s) that name no grant of the user (%(u)s) or their groups (CTE g).
_DENIED = (
    "SELECT ar.{col} FROM knowledge_accessrule ar WHERE ar.tenant_id = %(t)s AND ar.{col} IS NOT NULL"
    " GROUP BY ar.{col}"
    " HAVING count(*) FILTER (WHERE ar.user_id = %(u)s OR ar.group_id IN (SELECT id FROM g)) = 0"
)
_SCOPE = f"""WITH g AS MATERIALIZED (
    SELECT g.id FROM knowledge_accessgroup g JOIN knowledge_accessgroup_members gm ON gm.accessgroup_id = g.id
    WHERE g.tenant_id = %(t)s AND gm.user_id = %(u)s
)
SELECT EXISTS (SELECT 1 FROM knowledge_accessrule WHERE tenant_id = %(t)s),
       ARRAY(SELECT m.role FROM knowledge_membership m WHERE m.tenant_id = %(t)s AND m.user_id = %(u)s),
       ARRAY(SELECT id FROM g ORDER BY id),
       ARRAY(SELECT v.id FROM knowledge_documentversion v WHERE v.document_id IN (
             SELECT d.id FROM knowledge_document d WHERE d.tenant_id = %(t)s
                    AND d.source_id IN ({_DENIED.format(col="source_id")})
             UNION ALL {_DENIED.format(col="document_id")}) ORDER BY v.id)"""


# ---- selectors --------------------------------------------------------------------------------


def access_scope_get(*, tenant: Tenant, user) -> AccessScope | None:
    """The ``AccessScope`` of ``user`` asking in ``tenant``: one query (rules, roles, groups and the
    versions of the documents hidden from the user).

    ``None`` when ``user`` is ``None`` (an operator's command or an evaluation: no user-level
    rules). ``PermissionDenied`` when the user is neither a member of the tenant nor a superuser.
    """
    if user is None:
        return None
    user_id = getattr(user, "pk", None)
    superuser = bool(getattr(user, "is_superuser", False))
    with connection.cursor() as cursor:
        cursor.execute(_SCOPE, {"t": tenant.pk, "u": user_id})
        has_rules, roles, group_ids, denied = cursor.fetchone()
    if not roles and not superuser:
        raise PermissionDenied(f"You are not a member of tenant {tenant.slug}.")
    sees_all = superuser or any(role in BYPASS_ROLES for role in roles)
    return AccessScope(
        tenant_id=tenant.pk,
        user_id=user_id,
        group_ids=tuple(group_ids),
        sees_all=sees_all,
        has_rules=bool(has_rules),
        denied_versions=() if sees_all else tuple(denied),
    )


def _denied_ids(scope: AccessScope, target: str) -> QuerySet:
    granted = Q(user_id=scope.user_id) | Q(group_id__in=scope.group_ids)
    return (
        AccessRule.objects.for_tenant(scope.tenant_id)
        .filter(**{f"{target}__isnull": False})
        .order_by()
        .values(f"{target}_id")
        .annotate(granted=Count("pk", filter=granted))
        .filter(granted=0)
        .values(f"{target}_id")
    )


def _attached_by_others(scope: AccessScope, path: str) -> Q:
    """The files attached to conversations (``knowledge.attachments``) that no rule grants to the
    reader of ``scope``: private to their member, owners and admins included, and to no one once
    their rule is gone."""
    own = AccessRule.objects.for_tenant(scope.tenant_id).filter(user_id=scope.user_id, document__isnull=False)
    return Q(**{f"{path}source__kind": Source.Kind.CONVERSATION}) & ~Q(
        **{f"{path}{'pk' if not path else 'id'}__in": own.values("document_id")}
    )


def documents_visible(documents: QuerySet, scope: AccessScope | None, *, path: str = "") -> QuerySet:
    """``documents`` without those ``scope`` may not see (all of them when ``scope`` is ``None``).

    ``path`` reaches the document from the queryset's model, e.g. ``"version__document__"`` for
    chunks or ``"document__"`` for versions (empty for documents themselves). Files attached to
    conversations are left out for every user but the one a rule grants them to.
    """
    if scope is None:
        return documents
    documents = documents.exclude(_attached_by_others(scope, path))
    if not scope.restricts:
        return documents
    return documents.exclude(**{f"{path}source_id__in": _denied_ids(scope, "source")}).exclude(
        **{f"{path}{'pk' if not path else 'id'}__in": _denied_ids(scope, "document")}
    )


def sources_visible(sources: QuerySet[Source], scope: AccessScope | None) -> QuerySet[Source]:
    """``sources`` without the restricted ones ``scope`` is not granted (also a restricted source
    with no document yet, which ``denied_versions`` cannot tell). A user's ``scope`` never lists
    the source of the files attached to conversations (``knowledge.attachments``)."""
    if scope is None:
        return sources
    sources = sources.exclude(kind=Source.Kind.CONVERSATION)
    if scope.sees_all or not scope.has_rules:
        return sources
    return sources.exclude(pk__in=_denied_ids(scope, "source"))


def document_visible(*, scope: AccessScope | None, document_id: int) -> bool:
    """Whether the reader of ``scope`` may see document ``document_id`` of the scope's tenant."""
    if scope is None:
        return True
    return documents_visible(Document.objects.for_tenant(scope.tenant_id), scope).filter(pk=document_id).exists()


# ---- services ---------------------------------------------------------------------------------


def _tenant_members(tenant: Tenant, users) -> list:
    ids = {u.pk for u in users}
    members = set(Membership.objects.for_tenant(tenant).filter(user_id__in=ids).values_list("user_id", flat=True))
    strangers = sorted(str(u) for u in users if u.pk not in members)
    if strangers:
        raise InvalidInput(f"Not members of {tenant.slug}: {', '.join(strangers)}.", code="not_a_member")
    return list(users)


def access_group_save(*, tenant: Tenant, name: str, members=(), group: AccessGroup | None = None) -> AccessGroup:
    """Create (or, given ``group``, rename and re-staff) a group of ``tenant`` with ``members`` (users).

    Recorded in the audit log (``access_group.created``, ``access_group.changed`` with the name
    and members before and after). ``InvalidInput`` if a member does not belong to the tenant,
    the name is empty or taken.
    """
    name = (name or "").strip()
    if not name:
        raise InvalidInput("A group needs a name.")
    members = _tenant_members(tenant, list(members))
    if AccessGroup.objects.for_tenant(tenant).filter(name=name).exclude(pk=getattr(group, "pk", None)).exists():
        raise InvalidInput(f"{tenant.slug} already has a group {name!r}.", code="duplicate_group")
    with transaction.atomic():
        if group is None:
            before = {"name": None, "members": []}
            group = AccessGroup.objects.create(tenant=tenant, name=name)
        else:
            if group.tenant_id != tenant.pk:
                raise NotFound("No such group.")
            before = {"name": group.name, "members": list(group.members.all())}
            group.name = name
            group.save(update_fields=["name"])
        group.members.set(members)
        changes = audit_fields_diff(before, {"name": name, "members": members}, ["name", "members"])
        if changes:
            action = "access_group.created" if before["name"] is None else "access_group.changed"
            audit_record(action=action, tenant=tenant, obj=group, changes=changes)
    return group


def access_group_member_set(*, tenant: Tenant, group: AccessGroup, user, member: bool) -> bool:
    """Put ``user`` in ``group`` (``member=True``) or take them out, leaving the other members as
    they are; returns whether anything changed. Recorded like ``access_group_save``
    (``access_group.changed``, members before and after). ``InvalidInput`` when ``user`` is to
    join but is not a member of ``tenant``; ``NotFound`` for another tenant's group.
    """
    if group.tenant_id != tenant.pk:
        raise NotFound("No such group.")
    with transaction.atomic():
        group = AccessGroup.objects.for_tenant(tenant).select_for_update().get(pk=group.pk)
        before = list(group.members.all())
        if any(m.pk == user.pk for m in before) == member:
            return False
        if member:
            _tenant_members(tenant, [user])
            group.members.add(user)
            after = [*before, user]
        else:
            group.members.remove(user)
            after = [m for m in before if m.pk != user.pk]
        changes = audit_fields_diff({"members": before}, {"members": after}, ["members"])
        audit_record(action="access_group.changed", tenant=tenant, obj=group, changes=changes)
    return True


def access_rule_check(*, tenant: Tenant, source=None, document=None, group=None, user=None) -> None:
    """``InvalidInput`` unless exactly one of source/document and one of group/user are given, all of ``tenant``."""
    if (source is None) == (document is None):
        raise InvalidInput("A rule restricts exactly one source or one document.", code="invalid_rule")
    if (group is None) == (user is None):
        raise InvalidInput("A rule grants exactly one group or one user.", code="invalid_rule")
    for item in (source, document, group):
        if item is not None and item.tenant_id != tenant.pk:
            raise InvalidInput(f"{item} belongs to another tenant.", code="invalid_rule")
    if user is not None:
        _tenant_members(tenant, [user])


def access_rule_grant(*, tenant: Tenant, source=None, document=None, group=None, user=None) -> AccessRule:
    """Restrict ``source`` or ``document`` to (also) ``group`` or ``user``; the rule (existing or new).

    The first rule on a public source or document makes it restricted. Takes effect on the next
    query. A new rule is recorded in the audit log (``access_rule.created``). ``InvalidInput`` as
    ``access_rule_check``.
    """
    access_rule_check(tenant=tenant, source=source, document=document, group=group, user=user)
    with transaction.atomic():
        rule, created = AccessRule.objects.get_or_create(
            tenant=tenant, source=source, document=document, group=group, user=user
        )
        if created:
            audit_record(action="access_rule.created", tenant=tenant, obj=rule, changes=_rule_fields(rule))
    return rule


def access_rule_revoke(*, tenant: Tenant, rule_id: int) -> None:
    """Delete one of the tenant's rules (removing the last rule of a target makes it public
    again). Recorded in the audit log. ``NotFound`` if it is not the tenant's."""
    with transaction.atomic():
        rule = AccessRule.objects.for_tenant(tenant).select_related("source", "document", "group", "user")
        rule = rule.filter(pk=rule_id).first()
        if rule is None:
            raise NotFound(f"Access rule {rule_id} not found.")
        audit_record(action="access_rule.deleted", tenant=tenant, obj=rule, changes=_rule_fields(rule, deleted=True))
        rule.delete()


def _rule_fields(rule: AccessRule, *, deleted: bool = False) -> dict:
    """A rule's target and grantee for the audit log: ``{"source": [None, "handbook"], ...}``."""
    fields = {name: getattr(rule, name) for name in ("source", "document", "group", "user")}
    empty = dict.fromkeys(fields)
    return audit_fields_diff(fields, empty, fields) if deleted else audit_fields_diff(empty, fields, fields)


def user_for_name(username: str):
    """The user called ``username``; ``NotFound`` if none (management commands' ``--user``)."""
    user = get_user_model().objects.filter(username=username).first()
    if user is None:
        raise NotFound(f"No user {username!r}.")
    return user
