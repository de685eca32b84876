"""What every connector gives the sync (``knowledge.services.sync``): one contract, ``Connector``.

Every kind implements ``Connector`` (below): what changed since a checkpoint, every live key
(deletions), items read again, each document's permission and the source's groups. The service
connectors (Slack, Confluence, Google Drive, GitHub, Jira, Notion) implement it against a
service's API and say who may see each document there (``follows_permissions``). The file
connectors (folder, web, git) implement ``items(known)`` — a walk of the whole source with a cheap
change check per file — and ``FileConnector`` puts that walk on the contract: their "changes"
are the files whose check differs, their listing is the walk's keys, and their access is the
source's own rules.

A connector yields one ``Item`` per thing it reads from (a file, a page, a thread):

* ``Item(key, fingerprint, unchanged=True)`` when the cheap check (mtime and size, an HTTP 304,
  a git blob id) says the item is as the last sync left it: nothing is read or embedded;
* ``Item(key, fingerprint, documents=[...])`` with what it read (a file can hold several
  documents, e.g. JSONL); the sync then compares content hashes, so a touched but equal file
  costs no embedding;
* ``Item(key, error="...")`` when this one item could not be read (a 500, a corrupt file): it
  fails alone, and its documents keep their last good state.

* ``Item(key, deleted=True)`` when the change feed says the item is gone.

Everything the source held at the last sync but its listing no longer names is gone at the
source. A source that cannot be reached at all (server down, repository or folder missing)
raises ``SourceUnreachable``; a file connector raises it before anything is read, so the sync
changes nothing.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from fnmatch import fnmatch
from typing import Protocol

from core.errors import ApplicationError
from knowledge.ingestion.readers import ReadDocument
from knowledge.models import Source


class SourceUnreachable(ApplicationError):
    """The whole source could not be read (server down, repository missing): the sync changes nothing."""

    code = "source_unreachable"
    status = 502


@dataclass
class Item:
    """One file or page of a source, as a connector found it.

    ``key``: what the item is read from (a path relative to the source, a URL), stored as the
    documents' ``sync_key``; ``fingerprint``: the cheap change check (at most 300 characters);
    ``documents``: what was read (empty when ``unchanged`` or ``error``); ``error``: why this item
    could not be read (it fails alone).
    """

    key: str
    fingerprint: str = ""
    documents: list[ReadDocument] = field(default_factory=list)
    unchanged: bool = False
    error: str = ""
    # Who may see the item's documents at the source (connectors that follow permissions; None:
    # could not be read, see ``Permission``), the checkpoint that holds once this item and every
    # item before it are stored, and ``deleted`` when the change feed says the item is gone
    # (``Connector.changes``).
    permission: Permission | None = None
    checkpoint: dict | None = None
    deleted: bool = False


@dataclass(frozen=True)
class Permission:
    """Who may see a document at its source, as the source says.

    ``public``: anyone in the organisation (a public Slack channel, a Drive file shared with the
    domain or with anyone who has the link, an unrestricted page of an open space, Notion): the
    whole tenant. Otherwise only ``emails`` (source users by e-mail address, lower case) and the
    members of ``groups`` (``SourceGroup.external_id`` values of the same source). A document whose
    permission could not be read has none at all (``None`` where a ``Permission`` is expected): it
    is then visible to nobody but the tenant's admins (fail closed).
    """

    public: bool = False
    emails: frozenset[str] = frozenset()
    groups: frozenset[str] = frozenset()

    @classmethod
    def of(cls, *, public: bool = False, emails=(), groups=()) -> Permission:
        """A ``Permission`` with ``emails`` lower-cased and stripped, empty ones dropped."""
        return cls(
            public=public,
            emails=frozenset(e.strip().lower() for e in emails if e and e.strip()),
            groups=frozenset(str(g) for g in groups if g),
        )


PUBLIC = Permission(public=True)


@dataclass(frozen=True)
class SourceGroup:
    """A group of people at the source whose members may see documents: a Slack channel, a
    Confluence space's or group's members, a Google group, a GitHub team or a repository's
    collaborators, a Jira project role.

    ``external_id`` is the source's own id (what ``Permission.groups`` names); ``name`` is the
    access group's name in the product, prefixed by the kind (``slack:#secret-plans``,
    ``confluence:space:ENG``); ``emails`` its members' addresses, lower case.
    """

    external_id: str
    name: str
    emails: frozenset[str] = frozenset()


class CredentialRejected(SourceUnreachable):
    """The service refused the source's token or key (revoked, expired, missing a scope): the run
    fails with this message and nothing of the source changes."""

    code = "credential_rejected"
    status = 400


class Connector(Protocol):
    """The contract of every connector (module docstring).

    A service connector (Slack, Confluence, Google Drive, GitHub, Jira, Notion) is built as
    ``Kind(source, secret)`` with the decrypted token or key; ``source.location`` is the API's
    base URL and ``source.options`` the kind's options (a dict). A file connector is built as
    ``Kind(source)`` (``FileConnector``). ``follows_permissions`` says whether ``permissions`` and
    ``groups`` carry the source's own readers (true for services). Every method raises
    ``CredentialRejected`` when the service refuses the credential and ``SourceUnreachable`` when
    it cannot be reached at all (after the HTTP layer's retries); the sync then changes nothing
    more (what was stored before the failure stays, with its checkpoint).

    * ``check()``: one line saying what the credential can see ("12 channels (3 private),
      1,204 members"), for "test connection".
    * ``changes(checkpoint)``: an ``Item`` for each document created or changed since
      ``checkpoint`` (every document when it is ``{}``), with its ``documents`` and its
      ``permission``, or ``deleted=True`` for a document the change feed says is gone; each item
      carries in ``checkpoint`` the dict to store once it and every item before it are stored
      (the next sync, or a run resumed after a failure, passes it back). The requests it makes
      grow with the places (channels, spaces, repositories, projects) and the changes, never with
      the documents.
    * ``listing()``: ``(key, fingerprint)`` of every document the source holds now, as cheaply
      as the API allows (ids and versions, large pages): deletions are judged by it, and a
      fingerprint that differs from the stored one (an edit the change feed cannot see) gets the
      item read again with ``fetch``.
    * ``fetch(keys)``: an ``Item`` for each of ``keys`` (read again; ``deleted=True`` if gone).
    * ``permissions(keys)``: ``(key, Permission | None)`` for each of ``keys`` (live keys);
      ``None`` when that document's permission could not be read (it fails closed).
    * ``groups()``: every ``SourceGroup`` the permissions name, with its members.
    """

    kind: str
    follows_permissions: bool

    def check(self) -> str: ...

    def changes(self, checkpoint: dict) -> Iterable[Item]: ...

    def listing(self) -> Iterator[tuple[str, str]]: ...

    def fetch(self, keys: list[str]) -> Iterator[Item]: ...

    def permissions(self, keys: list[str]) -> Iterator[tuple[str, Permission | None]]: ...

    def groups(self) -> Iterator[SourceGroup]: ...


class FileConnector:
    """The file kinds (folder, web, git) on the ``Connector`` contract.

    A subclass implements ``items(known)``: every item the source holds now, ``known`` mapping each
    stored ``sync_key`` to its fingerprint, so an unchanged file is neither read nor embedded; it
    raises ``SourceUnreachable`` before yielding when the source cannot be read at all. On that:

    * ``changes(checkpoint, known=None)`` walks the source once and returns the walk's items as a
      list, so the sync knows how many there are to read and can show an ETA; ``known`` is the
      stored fingerprints by ``sync_key`` (the sync passes the copy it read at its start; read
      here when None, the ``checkpoint`` being unused);
    * ``listing()`` is that walk's keys (walking again only if ``changes`` did not run);
    * ``fetch`` reads nothing more (every changed file was read by ``changes``);
    * ``permissions`` and ``groups`` are empty: who may see a file source's documents is the
      source's own rules (``knowledge.access``), not the files'.
    * ``check()`` only tries the connection (``reach``), with the guards a sync applies; it walks
      nothing.

    A subclass also implements ``reach()``: the cheapest read that shows the source can be
    synced, with the same guards as ``items`` (the folder grant, the outbound address guard),
    returning what it found in a few words; ``SourceUnreachable`` as ``items`` would raise it.
    """

    follows_permissions = False
    source: Source

    def items(self, known: Mapping[str, str]) -> Iterator[Item]:
        raise NotImplementedError

    def _known(self) -> dict[str, str]:
        from knowledge.models import Document

        live = Document.objects.filter(tenant_id=self.source.tenant_id, source=self.source, deleted_at__isnull=True)
        return {key: fingerprint for key, fingerprint in live.values_list("sync_key", "fingerprint") if key}

    def reach(self) -> str:
        raise NotImplementedError

    def changes(self, checkpoint: dict, *, known: Mapping[str, str] | None = None) -> list[Item]:
        """Every item of the source (unchanged ones marked), read in one walk. ``known``: the
        stored fingerprints by ``sync_key`` (read from the database when None)."""
        known = self._known() if known is None else known
        items = list(self.items(known))
        self._walked = {
            item.key: known.get(item.key, "") if item.unchanged or item.error else item.fingerprint for item in items
        }
        return items

    def listing(self) -> Iterator[tuple[str, str]]:
        walked = getattr(self, "_walked", None)
        if walked is None:
            self.changes({})
            walked = self._walked
        yield from walked.items()

    def fetch(self, keys: list[str]) -> Iterator[Item]:
        return iter(())

    def permissions(self, keys: list[str]) -> Iterator[tuple[str, Permission | None]]:
        return iter(())

    def groups(self) -> Iterator[SourceGroup]:
        return iter(())

    def check(self) -> str:
        """ "Test connection": one line saying the source answers (``reach``), without walking it
        or reading the stored documents. ``SourceUnreachable`` (a refused location or address among them)
        saying why not."""
        return f"{self.reach()}; the next sync walks it."


def path_selected(path: str, include: list[str], exclude: list[str]) -> bool:
    """Whether ``path`` (relative, ``/``-separated) matches an ``include`` glob (any, when empty)
    and no ``exclude`` glob. Globs are ``fnmatch`` patterns, where ``*`` also matches ``/``."""
    if include and not any(fnmatch(path, pattern) for pattern in include):
        return False
    return not any(fnmatch(path, pattern) for pattern in exclude)
