"""The folder connector: every supported file under a path the workers can read.

A file's key is its path relative to the folder; its fingerprint is its modification time (ns)
and size, so an untouched file is neither read nor embedded. Document ids and URIs are the ones
``manage.py ingest --root FOLDER`` gives (the path without its suffix, ``uri_prefix`` + id).
Hidden files and folders are skipped.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from pathlib import Path

from core.errors import ApplicationError
from knowledge.connectors.base import Item, SourceUnreachable, path_selected
from knowledge.ingestion.readers import SUPPORTED_EXTENSIONS, read_path
from knowledge.models import Source


class FolderConnector:
    """Reads ``source.location`` (a folder) with the source's include and exclude globs."""

    def __init__(self, source: Source):
        self.source = source
        self.root = Path(source.location).expanduser()

    def _files(self) -> Iterator[tuple[str, Path]]:
        """(relative path, file) of every selected, supported, not hidden file, sorted."""
        found = []
        for folder, dirs, files in os.walk(self.root):
            dirs[:] = [d for d in dirs if not d.startswith(".")]
            for name in files:
                if name.startswith(".") or Path(name).suffix.lower() not in SUPPORTED_EXTENSIONS:
                    continue
                file = Path(folder) / name
                relative = file.relative_to(self.root).as_posix()
                if path_selected(relative, self.source.include, self.source.exclude):
                    found.append((relative, file))
        return iter(sorted(found))

    def items(self, known: Mapping[str, str]) -> Iterator[Item]:
        """Yield an ``Item`` per selected file (see ``knowledge.connectors.base``).

        ``SourceUnreachable`` when the folder is missing or unreadable.
        """
        if not self.root.is_dir():
            raise SourceUnreachable(f"{self.source.location}: no such folder (or the workers cannot read it).")
        if not os.access(self.root, os.R_OK | os.X_OK):
            raise SourceUnreachable(f"{self.source.location}: the workers may not read this folder.")
        for relative, file in self._files():
            try:
                stat = file.stat()
            except OSError as exc:
                yield Item(relative, error=f"{relative}: {exc.strerror or exc}")
                continue
            fingerprint = f"{stat.st_mtime_ns}:{stat.st_size}"
            if known.get(relative) == fingerprint:
                yield Item(relative, fingerprint, unchanged=True)
                continue
            try:
                documents = read_path(
                    file, root=self.root, uri_prefix=self.source.uri_prefix, fmt=self.source.text_format or None
                )
            except ApplicationError as exc:
                yield Item(relative, fingerprint, error=exc.message)
            except OSError as exc:
                yield Item(relative, fingerprint, error=f"{relative}: {exc.strerror or exc}")
            else:
                yield Item(relative, fingerprint, documents=documents)
