"""A scripted service connector for the sync's own tests: documents, groups and permissions held
in a dict the test changes, no HTTP. The services' real connectors are tested against their
stand-ins (``tests/connectors/standins``).

``scripted_service(monkeypatch)`` makes every ``slack`` source read a ``ScriptedService``, which
the fixture returns::

    service.put("a", "Title", "text", Permission.of(groups=["C1"]))
    service.group("C1", "slack:#secret", ["ann@example.com"])
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

from knowledge.connectors import services as registry
from knowledge.connectors.base import CredentialRejected, Item, Permission, SourceGroup, SourceUnreachable
from knowledge.ingestion.documents import ReadDocument


@dataclass
class ScriptedService:
    """The state of a scripted service: documents by key (title, text, version, permission), groups."""

    documents: dict[str, dict] = field(default_factory=dict)
    groups: dict[str, SourceGroup] = field(default_factory=dict)
    calls: list[str] = field(default_factory=list)
    revoked: bool = False
    fail_after: int | None = None  # changes() raises SourceUnreachable after this many items
    permissions_unreadable: set[str] = field(default_factory=set)
    seen_checkpoints: list[dict] = field(default_factory=list)
    clock: int = 0

    def put(self, key: str, title: str, text: str, permission: Permission | None = None) -> None:
        """Create or edit document ``key`` (its version moves on)."""
        self.clock += 1
        old = self.documents.get(key, {})
        self.documents[key] = {
            "title": title,
            "text": text,
            "version": old.get("version", 0) + 1,
            "changed": self.clock,
            "permission": permission if permission is not None else Permission(public=True),
        }

    def group(self, external_id: str, name: str, emails: list[str]) -> None:
        self.groups[external_id] = SourceGroup(external_id, name, frozenset(e.lower() for e in emails))


class ScriptedConnector:
    """A ``Connector`` over a ``ScriptedService``."""

    kind = "slack"
    follows_permissions = True
    service: ScriptedService

    def __init__(self, source, secret: str):
        self.source, self.secret = source, secret

    def _guard(self, call: str) -> None:
        self.service.calls.append(call)
        if self.service.revoked:
            raise CredentialRejected("The scripted service refused the token (revoked). Nothing was changed.")

    def _item(self, key: str) -> Item:
        doc = self.service.documents[key]
        permission = None if key in self.service.permissions_unreadable else doc["permission"]
        return Item(
            key=key,
            fingerprint=str(doc["version"]),
            documents=[ReadDocument(external_id=f"scripted/{key}", title=doc["title"], text=doc["text"])],
            permission=permission,
            checkpoint={"clock": doc["changed"]},
        )

    def check(self) -> str:
        self._guard("check")
        return f"{len(self.service.documents)} documents"

    def changes(self, checkpoint: dict) -> Iterator[Item]:
        self._guard("changes")
        self.service.seen_checkpoints.append(dict(checkpoint))
        since = checkpoint.get("clock", 0)
        changed = sorted((d["changed"], k) for k, d in self.service.documents.items() if d["changed"] > since)
        for count, (_clock, key) in enumerate(changed):
            if self.service.fail_after is not None and count >= self.service.fail_after:
                raise SourceUnreachable("The scripted service went away half-way.")
            yield self._item(key)

    def listing(self) -> Iterator[tuple[str, str]]:
        self._guard("listing")
        for key, doc in self.service.documents.items():
            yield key, str(doc["version"])

    def fetch(self, keys: list[str]) -> Iterator[Item]:
        self._guard("fetch")
        for key in keys:
            yield self._item(key) if key in self.service.documents else Item(key=key, deleted=True)

    def permissions(self, keys: list[str]) -> Iterator[tuple[str, Permission | None]]:
        self._guard("permissions")
        for key in keys:
            if key in self.service.documents:
                unreadable = key in self.service.permissions_unreadable
                yield key, None if unreadable else self.service.documents[key]["permission"]

    def groups(self) -> Iterator[SourceGroup]:
        self._guard("groups")
        yield from self.service.groups.values()


class _Bound(ScriptedConnector):
    """The connector ``scripted_service`` installs: each tenant's sources read that tenant's service."""

    services: dict[int | None, ScriptedService] = {}

    def __init__(self, source, secret: str):
        super().__init__(source, secret)
        self.service = self.services.get(source.tenant_id) or self.services[None]


def scripted_service(monkeypatch, *, tenant_id: int | None = None) -> ScriptedService:
    """Make ``slack`` sources read a fresh ``ScriptedService`` (only the sources of ``tenant_id``,
    when given; each tenant may have its own); returns it."""
    services = getattr(registry.connector_class, "services", None)
    if services is None:
        services = {}
        bound = type("BoundScriptedConnector", (_Bound,), {"services": services})
        monkeypatch.setattr(registry, "connector_class", lambda kind: bound)
        registry.connector_class.services = services
    service = ScriptedService()
    services[tenant_id] = service
    return service
