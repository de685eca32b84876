"""What every connector gives the sync (``knowledge.services.sync``): the items of a source.

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
