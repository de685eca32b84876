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
    # Documents synced from a service with the permissions it gave (``synced_documents``): key -> who
    # may see it besides the owner and admins ("*": every member).
    synced: dict[str, set[str]] = field(default_factory=dict)
    # Who attached the file ``attached`` to a conversation of theirs (``attached_document``): theirs alone.
    attached_by: str = ""

    def visible_keys(self, who: str) -> set[str]:
        """Which of this tenant's documents the user ``who`` may see."""
        own = {"attached"} if who == self.attached_by else set()
        if who in ("owner", "admin"):
            return {"public", "board", "private", *self.synced} | own
        synced = {key for key, readers in self.synced.items() if who in readers or "*" in readers}
        return (
            {"public"}
            | ({"board"} if who == "board" else set())
            | ({"private"} if who == "granted" else set())
            | synced
            | own
        )


# Who a service's permission may name (the owner and admins see everything anyway).
SYNCED_READERS = ("editor", "member", "viewer", "board", "granted")


def synced_documents(world: TenantWorld, service, rng, *, count: int = 3) -> None:
    """Sync ``count`` documents into ``world`` from a scripted service (``tests.connectors.scripted``)
    with permissions drawn by ``rng``: public, a channel of drawn members, drawn e-mail addresses,
    or unreadable (admins only). Adds them to ``world.documents`` and ``world.synced``."""
    from knowledge.connectors.base import Permission
    from knowledge.services.sources import source_create
    from knowledge.services.sync import source_sync

    for who, user in world.users.items():
        user.email = f"{world.tenant.slug}-{who}@example.com"
        user.save(update_fields=["email"])
    marker = world.tenant.slug.replace("-", "")
    for n in range(count):
        kind = rng.choice(["public", "channel", "emails", "unreadable"])
        readers = set(rng.sample(SYNCED_READERS, rng.randint(0, 3)))
        emails = [world.users[who].email.upper() for who in readers]
        key = f"synced{n}"
        if kind == "public":
            permission, readers = Permission(public=True), {"*"}
        elif kind == "channel":
            permission = Permission.of(groups=[f"C{n}"])
            service.group(f"C{n}", f"slack:#room-{n}", emails)
        elif kind == "emails":
            permission = Permission.of(emails=emails)
        else:
            permission, readers = Permission.of(public=True), set()
            service.permissions_unreadable.add(key)
        title = f"Synced {key} synczq{marker}{n}"
        service.put(
            key,
            title,
            f"{title}\n\nThe synced handbook note synczq{marker}{n}: patch the bicycle tyre puncture with glue "
            "and a rubber patch, then inflate the tube.",
            permission,
        )
        world.synced[key] = readers
    source = source_create(
        tenant=world.tenant, name="team-chat", kind="slack", location="https://slack.com/api/", secret="xoxb-test"
    )
    run = source_sync(source=source)
    assert run.status == "done", run.error
    for key in world.synced:
        world.documents[key] = Document.objects.get(tenant=world.tenant, source=source, sync_key=key)
    world.sources["team-chat"] = source


def attached_document(world: TenantWorld, who: str = "member") -> None:
    """A file ``who`` attaches to a new conversation of theirs (``people.attachments``): no one else
    may see it, not even the owner and admins. Adds it to ``world.documents`` as ``attached``."""
    from people.attachments import conversation_file_attach

    marker = f"attzq{world.tenant.slug.replace('-', '')}"
    text = (
        f"# Attached {marker}\n\nThe attached note {marker}.md: patch the bicycle tyre puncture with glue and a "
        f"rubber patch, then inflate the tube. Remember {marker} when the tyre goes flat again.\n"
    )
    attached = conversation_file_attach(
        tenant=world.tenant, user=world.users[who], file_name=f"{marker}.md", data=text.encode()
    )
    world.documents["attached"] = attached.document
    world.attached_by = who


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
