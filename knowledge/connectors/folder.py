"""The folder connector: every supported file under a folder the operator granted to the tenant.

A file's key is its path relative to the folder; its fingerprint is its modification time (ns)
and size, so an untouched file is neither read nor embedded. Document ids and URIs are the ones
``manage.py ingest --root FOLDER`` gives (the path without its suffix, ``uri_prefix`` + id).
Hidden files and folders are skipped.

The tenant boundary (``knowledge.folder_grants``): before anything is read, the
location's real path must lie inside one of the tenant's grants, still the folder granted (its
device and inode), and clear of the data directory, or the sync fails (code
``location_not_allowed``) and nothing changes. The location is then opened one component at a
time from ``/`` without following links (``folder_open``), and every file one folder at a time
below that descriptor (``O_NOFOLLOW``), so a link swapped in between the check and the read is
refused rather than followed. Inside, a file whose real path leaves the folder (a symbolic link,
``..``) or enters the data directory is skipped and named in the run's ``errors``, and so is a
file with several hard links or on another file system than the granted folder (it may be
another tenant's file), unless the operator allowed that for the grant
(``manage.py folderroots --allow-hard-links``). Only regular files are read, at most
``KB_PARSE_MAX_UNPACKED_MB`` each.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator, Mapping
from pathlib import Path

from django.conf import settings

from core.errors import ApplicationError, InvalidInput
from knowledge.connectors.base import FileConnector, Item, SourceUnreachable, path_selected
from knowledge.folder_grants import NOT_ALLOWED, folder_location_check, folder_open, path_inside
from knowledge.ingestion.readers import SUPPORTED_EXTENSIONS, read_bytes
from knowledge.models import FolderGrant, Source

_FOLDER_FLAGS = getattr(os, "O_PATH", os.O_RDONLY) | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_FILE_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC  # a FIFO must not block the open


class NotRegularFile(OSError):
    """The path is not a regular file (a FIFO, a device, a socket), or a link appeared in it."""


class LinkedFile(Exception):
    """A regular file with several hard links, or on another file system than its granted folder:
    it may be a file from anywhere on that file system (another tenant's upload), whatever its path."""


def file_links_check(info: os.stat_result, *, grant: FolderGrant | None) -> None:
    """Refuse (``LinkedFile``, saying why) a file that has more than one hard link, or lies on
    another device than the granted folder, unless the operator allowed it for ``grant``
    (``FolderGrant.allow_hard_links``)."""
    if grant is not None and grant.allow_hard_links:
        return
    if info.st_nlink > 1:
        raise LinkedFile(f"a hard link ({info.st_nlink} names for one file)")
    if grant is not None and grant.device is not None and info.st_dev != int(grant.device):
        raise LinkedFile("on another file system than the granted folder (a mount inside it)")


def linked_file_message(name: str, exc: LinkedFile, grant: FolderGrant | None) -> str:
    """What the run's errors say of a file ``file_links_check`` refused."""
    where = grant.path if grant is not None else "<folder>"
    return (
        f"{name}: {exc}, so it may be a file from outside the granted folder; skipped. The operator may allow "
        f"such files in this folder (`manage.py folderroots <tenant> --allow-hard-links {where}`)."
    )


def file_read_beneath(dir_fd: int, relative: Path, *, max_bytes: int, grant: FolderGrant | None) -> bytes:
    """The bytes of the regular file ``relative`` below the folder descriptor ``dir_fd``, opened one
    component at a time without following any link (``relative`` is a real path below that folder,
    so a link found on the way was swapped in after the check: ``OSError``). ``NotRegularFile``
    for anything but a regular file; ``LinkedFile`` for a hard link or a file on another file
    system (``file_links_check``); ``ValueError`` when it is larger than ``max_bytes``."""
    opened: list[int] = []
    fd = dir_fd
    try:
        for part in relative.parts[:-1]:
            fd = os.open(part, _FOLDER_FLAGS, dir_fd=fd)
            opened.append(fd)
        file_fd = os.open(relative.parts[-1], _FILE_FLAGS, dir_fd=fd)
    finally:
        for folder_fd in opened:
            os.close(folder_fd)
    with os.fdopen(file_fd, "rb") as handle:
        info = os.fstat(handle.fileno())
        if not stat.S_ISREG(info.st_mode):
            raise NotRegularFile("not a regular file")
        file_links_check(info, grant=grant)
        if info.st_size > max_bytes:
            raise ValueError(info.st_size)
        data = handle.read(max_bytes + 1)
    if len(data) > max_bytes:
        raise ValueError(len(data))
    return data


class FolderConnector(FileConnector):
    """Reads ``source.location`` (a folder) with the source's include and exclude globs."""

    kind = "folder"

    def __init__(self, source: Source):
        self.source = source
        self.root = Path(source.location).expanduser()
        self._root_fd: int | None = None  # the location, opened by folder_open while items() runs
        self._grant: FolderGrant | None = None

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

        ``SourceUnreachable`` when the folder is not granted to the tenant, or its grant's folder
        was replaced (code ``location_not_allowed``), or it is missing or unreadable.
        """
        self._root_open()
        try:
            yield from self._items(known)
        finally:
            os.close(self._root_fd)
            self._root_fd = None

    def reach(self) -> str:
        """The folder is granted, still the folder granted, and opens for reading (as ``items``
        checks it, ``SourceUnreachable`` otherwise); nothing below it is listed or read."""
        self._root_open()
        os.close(self._root_fd)
        self._root_fd = None
        return f"{self.source.location}: a granted folder the workers can read"

    def _root_open(self) -> None:
        """Check the location against the tenant's grants and open it (``_root_fd``, ``_grant``);
        ``SourceUnreachable`` as ``items`` says."""
        try:
            self.root = folder_location_check(tenant=self.source.tenant_id, location=self.source.location)
        except InvalidInput as exc:
            raise SourceUnreachable(exc.message, code=NOT_ALLOWED) from None
        if not self.root.is_dir():
            raise SourceUnreachable(f"{self.source.location}: no such folder (or the workers cannot read it).")
        if not os.access(self.root, os.R_OK | os.X_OK):
            raise SourceUnreachable(f"{self.source.location}: the workers may not read this folder.")
        try:
            self._root_fd, self._grant = folder_open(tenant=self.source.tenant_id, path=self.root)
        except InvalidInput as exc:
            raise SourceUnreachable(exc.message, code=NOT_ALLOWED) from None
        except OSError:
            raise SourceUnreachable(
                f"{self.source.location}: no such folder (or the workers cannot read it)."
            ) from None

    def _items(self, known: Mapping[str, str]) -> Iterator[Item]:
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
            except NotRegularFile:
                yield Item(relative, fingerprint, error=f"{relative}: not a regular file; skipped.")
            except LinkedFile as exc:
                yield Item(relative, fingerprint, error=linked_file_message(relative, exc, self._grant))
            except ValueError:
                yield Item(relative, fingerprint, error=f"{relative}: larger than {max_bytes // 2**20} MB; skipped.")
            except OSError as exc:
                yield Item(relative, fingerprint, error=f"{relative}: {exc.strerror or exc}")
            else:
                yield Item(relative, fingerprint, documents=documents)

    def _bytes(self, file: Path, max_bytes: int) -> bytes:
        """The bytes of ``file`` (checked by ``path_inside``), read below the location's descriptor."""
        relative = file.resolve().relative_to(self.root)
        return file_read_beneath(self._root_fd, relative, max_bytes=max_bytes, grant=self._grant)

    def _read(self, relative: str, name: str, data: bytes) -> list:
        """The documents of one file, with the ids and URIs ``read_path`` gives (relative to the folder)."""
        path = Path(relative)
        external_id = str(path.with_suffix("")) if path.suffix.lower() != ".jsonl" else str(path)
        prefix = self.source.uri_prefix
        uri = f"{prefix}{path.with_suffix('')}" if prefix else str(self.root / path)
        return read_bytes(data, name=name, external_id=external_id, uri=uri, fmt=self.source.text_format or None)
