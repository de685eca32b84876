"""The folder connector: every supported file under a folder the operator granted to the tenant.

A file's key is its path relative to the folder; its fingerprint is its modification time (ns)
and size, so an untouched file is neither read nor embedded. Document ids and URIs are the ones
``manage.py ingest --root FOLDER`` gives (the path without its suffix, ``uri_prefix`` + id).
Hidden files and folders are skipped.

The tenant boundary (``knowledge.folder_grants``): before anything is read, the
location's real path must lie inside one of the tenant's grants and clear of the data directory,
or the sync fails (code ``location_not_allowed``) and nothing changes. Inside, a file whose real
path leaves the folder (a symbolic link, ``..``) or enters the data directory is skipped and named
in the run's ``errors``. Files are opened one folder at a time below the granted folder's real
path without following links (``O_NOFOLLOW``), so a link swapped in between the check and the
read is refused rather than followed; only regular files are read, at most
``KB_PARSE_MAX_UNPACKED_MB`` each.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator, Mapping
from pathlib import Path

from django.conf import settings

from core.errors import ApplicationError, InvalidInput
from knowledge.connectors.base import Item, SourceUnreachable, path_selected
from knowledge.folder_grants import NOT_ALLOWED, folder_location_check, path_inside
from knowledge.ingestion.readers import SUPPORTED_EXTENSIONS, read_bytes
from knowledge.models import Source

_FOLDER_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_FILE_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC  # a FIFO must not block the open


class _NotRegularFile(OSError):
    """The path is not a regular file (a FIFO, a device, a socket), or a link appeared in it."""


def file_read_beneath(root: Path, relative: Path, *, max_bytes: int) -> bytes:
    """The bytes of the regular file ``root``/``relative``, opened one component at a time without
    following any link (``root`` and ``relative`` are real paths, so a link found on the way was
    swapped in after the check: ``OSError``). ``_NotRegularFile`` for anything but a regular file;
    ``ValueError`` when it is larger than ``max_bytes``."""
    fd = os.open(root, _FOLDER_FLAGS)
    try:
        for part in relative.parts[:-1]:
            inner = os.open(part, _FOLDER_FLAGS, dir_fd=fd)
            os.close(fd)
            fd = inner
        file_fd = os.open(relative.parts[-1], _FILE_FLAGS, dir_fd=fd)
    finally:
        os.close(fd)
    with os.fdopen(file_fd, "rb") as handle:
        info = os.fstat(handle.fileno())
        if not stat.S_ISREG(info.st_mode):
            raise _NotRegularFile("not a regular file")
        if info.st_size > max_bytes:
            raise ValueError(info.st_size)
        data = handle.read(max_bytes + 1)
    if len(data) > max_bytes:
        raise ValueError(len(data))
    return data


class FolderConnector:
    """Reads ``source.location`` (a folder) with the source's include and exclude globs."""

    def __init__(self, source: Source):
        self.source = source
        self.root = Path(source.location).expanduser()

    def _files(self) -> Iterator[tuple[str, Path]]:
        """(relative path, file) of every selected, supported, not hidden file, sorted. Links to
        folders are not followed."""
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

        ``SourceUnreachable`` when the folder is not granted to the tenant (code
        ``location_not_allowed``), missing or unreadable.
        """
        try:
            self.root = folder_location_check(tenant=self.source.tenant_id, location=self.source.location)
        except InvalidInput as exc:
            raise SourceUnreachable(exc.message, code=NOT_ALLOWED) from None
        if not self.root.is_dir():
            raise SourceUnreachable(f"{self.source.location}: no such folder (or the workers cannot read it).")
        if not os.access(self.root, os.R_OK | os.X_OK):
            raise SourceUnreachable(f"{self.source.location}: the workers may not read this folder.")
        max_bytes = settings.KB_PARSE_MAX_UNPACKED_MB * 2**20
        for relative, file in self._files():
            if not path_inside(file, self.root):
                yield Item(relative, error=f"{relative}: leads outside the granted folder (a link or ..); skipped.")
                continue
            try:
                info = file.stat()
            except OSError as exc:
                yield Item(relative, error=f"{relative}: {exc.strerror or exc}")
                continue
            fingerprint = f"{info.st_mtime_ns}:{info.st_size}"
            if known.get(relative) == fingerprint:
                yield Item(relative, fingerprint, unchanged=True)
                continue
            try:
                documents = self._read(relative, file.name, self._bytes(file, max_bytes))
            except ApplicationError as exc:
                yield Item(relative, fingerprint, error=exc.message)
            except _NotRegularFile:
                yield Item(relative, fingerprint, error=f"{relative}: not a regular file; skipped.")
            except ValueError:
                yield Item(relative, fingerprint, error=f"{relative}: larger than {max_bytes // 2**20} MB; skipped.")
            except OSError as exc:
                yield Item(relative, fingerprint, error=f"{relative}: {exc.strerror or exc}")
            else:
                yield Item(relative, fingerprint, documents=documents)

    def _bytes(self, file: Path, max_bytes: int) -> bytes:
        """The bytes of ``file`` (checked by ``path_inside``), read below the granted folder."""
        return file_read_beneath(self.root, file.resolve().relative_to(self.root), max_bytes=max_bytes)

    def _read(self, relative: str, name: str, data: bytes) -> list:
        """The documents of one file, with the ids and URIs ``read_path`` gives (relative to the folder)."""
        path = Path(relative)
        external_id = str(path.with_suffix("")) if path.suffix.lower() != ".jsonl" else str(path)
        prefix = self.source.uri_prefix
        uri = f"{prefix}{path.with_suffix('')}" if prefix else str(self.root / path)
        return read_bytes(data, name=name, external_id=external_id, uri=uri, fmt=self.source.text_format or None)
