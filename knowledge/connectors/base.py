"""What every connector gives the sync (``knowledge.services.sync``): the items of a source.

Two shapes share the ``Item``: the file connectors (folder, web, git) list the whole source at
every sync (``Connector.items``); the service connectors (Slack, Confluence, Google Drive,
GitHub, Jira, Notion) read a service's API and also say who may see each document there
(``ServiceConnector``, below).

A connector walks its source and yields one ``Item`` per thing it reads from (a file, a page):

* ``Item(key, fingerprint, unchanged=True)`` when the cheap check (mtime and size, an HTTP 304,
  a git blob id) says the item is as the last sync left it: nothing is read or embedded;
* ``Item(key, fingerprint, documents=[...])`` with what it read (a file can hold several
  documents, e.g. JSONL); the sync then compares content hashes, so a touched but equal file
  costs no embedding;
* ``Item(key, error="...")`` when this one item could not be read (a 500, a corrupt file): it
  fails alone, and its documents keep their last good state.

Everything the source held at the last sync but no item names now is gone at the source. A
source that cannot be reached at all (server down, repository or folder missing) raises
``SourceUnreachable`` from ``items``, and the sync changes nothing.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from fnmatch import fnmatch
from typing import Protocol

from core.errors import ApplicationError
from knowledge.ingestion.readers import ReadDocument


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
    # Service connectors only: who may see the item's documents at the source (None: not read, or
    # could not be read; see ``Permission``), the checkpoint that holds once this item and every
    # item before it are stored, and ``deleted`` when the change feed says the item is gone
    # (``ServiceConnector.changes``).
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


class ServiceConnector(Protocol):
    """A connector for a service's API (Slack, Confluence, Google Drive, GitHub, Jira, Notion).

    Built as ``Kind(source, secret)`` with the decrypted token or key; ``source.location`` is the
    API's base URL and ``source.options`` the kind's options (a dict). Every method raises
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

    def check(self) -> str: ...

    def changes(self, checkpoint: dict) -> Iterator[Item]: ...

    def listing(self) -> Iterator[tuple[str, str]]: ...

    def fetch(self, keys: list[str]) -> Iterator[Item]: ...

    def permissions(self, keys: list[str]) -> Iterator[tuple[str, Permission | None]]: ...

    def groups(self) -> Iterator[SourceGroup]: ...


class Connector(Protocol):
    """A source's connector. ``known`` maps each ``sync_key`` stored for the source to its fingerprint.

    ``items`` yields every item the source holds now (see the module docstring) and raises
    ``SourceUnreachable`` when the source cannot be read at all.
    """

    def items(self, known: Mapping[str, str]) -> Iterator[Item]: ...


def path_selected(path: str, include: list[str], exclude: list[str]) -> bool:
    """Whether ``path`` (relative, ``/``-separated) matches an ``include`` glob (any, when empty)
    and no ``exclude`` glob. Globs are ``fnmatch`` patterns, where ``*`` also matches ``/``."""
    if include and not any(fnmatch(path, pattern) for pattern in include):
        return False
    return not any(fnmatch(path, pattern) for pattern in exclude)
