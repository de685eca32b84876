"""A world of two tenants with public and restricted documents, and users of every role and grant.

Shared by the access-rule tests, the randomized isolation test and the browser test. Every
document carries a unique marker word in its title and text, so a leak is a marker (or an id)
found in a response.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from core.models import Membership, Tenant
from knowledge.access import access_group_save, access_rule_grant
from knowledge.ingestion.readers import ReadDocument
from knowledge.models import Document, Source
from knowledge.services import documents_ingest
from tests.factories import MembershipFactory, SourceFactory, TenantFactory

ROLES = [r.value for r in Membership.Role]


@dataclass
class TenantWorld:
    tenant: Tenant
    sources: dict[str, Source]
    documents: dict[str, Document]  # key: public, board (group-restricted source), private (user-restricted document)
    users: dict[str, object] = field(default_factory=dict)  # key: role, "board" (in the group), "granted"

    def visible_keys(self, who: str) -> set[str]:
        """Which of this tenant's documents the user ``who`` may see."""
        if who in ("owner", "admin"):
            return {"public", "board", "private"}
        return {"public"} | ({"board"} if who == "board" else set()) | ({"private"} if who == "granted" else set())


def _doc(slug: str, key: str, marker: str, topic: str) -> ReadDocument:
    title = f"{topic.title()} {marker}"
    return ReadDocument(
        external_id=f"{key}/{slug}",
        title=title,
        text=f"{title}\n\nThe {topic} handbook note {marker}: patch the bicycle tyre puncture with glue and a "
        f"rubber patch, then inflate the tube. Remember {marker} when the tyre goes flat again.",
    )


def tenant_world(slug: str) -> TenantWorld:
    """A tenant with three documents about the same topic (so any query finds them all):

    ``public`` (source ``handbook``, no rule), ``board`` (source ``board``, restricted to group
    ``board``) and ``private`` (source ``handbook``, the document restricted to user ``granted``);
    users of every role, one member in group ``board`` and one member granted ``private``.
    """
    tenant = TenantFactory(slug=slug)
    handbook = SourceFactory(tenant=tenant, name="handbook")
    board = SourceFactory(tenant=tenant, name="board")
    marker = slug.replace("-", "")
    documents_ingest(tenant=tenant, source=handbook, documents=[_doc(slug, "public", f"pubzq{marker}", "cycling")])
    documents_ingest(tenant=tenant, source=board, documents=[_doc(slug, "board", f"boardzq{marker}", "board")])
    documents_ingest(tenant=tenant, source=handbook, documents=[_doc(slug, "private", f"privzq{marker}", "private")])
    docs = {
        key: Document.objects.get(tenant=tenant, external_id__startswith=f"{key}/")
        for key in ("public", "board", "private")
    }
    world = TenantWorld(tenant=tenant, sources={"handbook": handbook, "board": board}, documents=docs)
    for role in ROLES:
        membership = MembershipFactory(tenant=tenant, role=role, user__username=f"{slug}-{role}")
        if role in ("owner", "admin"):
            membership.user.is_staff = True
            membership.user.save()
        world.users[role] = membership.user
    for name in ("board", "granted"):
        world.users[name] = MembershipFactory(tenant=tenant, role="member", user__username=f"{slug}-{name}").user
    group = access_group_save(tenant=tenant, name="board", members=[world.users["board"]])
    access_rule_grant(tenant=tenant, source=board, group=group)
    access_rule_grant(tenant=tenant, document=docs["private"], user=world.users["granted"])
    return world


def markers(document: Document) -> list[str]:
    """Strings whose presence in a response shows ``document``: its title's marker word and its id in links."""
    marker = document.title.split()[-1]
    return [marker, f"/documents/{document.pk}/", f'"document_id": {document.pk},', f'"document_id": {document.pk}}}']
