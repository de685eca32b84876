"""Local git repositories (a path or a ``file://`` URL inside a grant), read in place by descriptor.

Checking a repository's path and then handing that path to dulwich would let whoever can write in
the granted folder swap the repository (for a link to another tenant's, say) between the two.
So ``local_repository_open`` opens it the way the folder connector opens files:

1. the repository's folder from ``/``, one component at a time, without following links
   (``knowledge.folder_grants.folder_open``: each granted folder on the way must still be the
   folder granted, by its device and inode);
2. below that descriptor, without following links: the control folder (``.git``, or the folder
   itself for a bare repository), its object store (``objects``) and pack folder
   (``objects/pack``), and the object stores its ``objects/info/alternates`` names (each inside a
   grant of the tenant, opened the same way; at most 3 deep);
3. dulwich reads them through ``/proc/self/fd/N``, which names the folder opened, not a path, so
   a swap after the check is not what is read;
4. the tip of the branch is read here, from the ref files below the control folder's descriptor
   (``O_NOFOLLOW``); a ref file with several hard links or on another file system is refused like
   a folder source's file (``knowledge.connectors.folder.file_links_check``).

Refused with a message: a ``.git`` file (a linked worktree or a submodule: point the source at the
repository it names), a control folder with a ``commondir`` (a linked worktree's), a link where
a folder of the repository should be, a link in the object store leading outside the tenant's
grants. Files inside the pinned folders (packs, loose objects) are still opened by dulwich by
name; each is named by the hash of its content, so a link there could only bring in objects
whose ids the repository already names.
"""

from __future__ import annotations

import errno
import os
import re
import stat
from collections.abc import Callable
from pathlib import Path

from django.conf import settings
from dulwich.object_store import DiskObjectStore
from dulwich.objects import Commit
from dulwich.refs import check_ref_format
from dulwich.repo import Repo

from core.errors import InvalidInput
from knowledge.connectors.base import SourceUnreachable
from knowledge.connectors.folder import LinkedFile, NotRegularFile, file_read_beneath, linked_file_message
from knowledge.folder_grants import NOT_ALLOWED, folder_open
from knowledge.models import FolderGrant

_FOLDER_FLAGS = getattr(os, "O_PATH", os.O_RDONLY) | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_SHA = re.compile(rb"[0-9a-f]{40}")
_MAX_REF_BYTES = 4096
_MAX_ALTERNATES_DEPTH = 3


def _proc(fd: int) -> str:
    """The path dulwich is given for the folder open as ``fd``: it names that folder, not a path."""
    return f"/proc/self/fd/{fd}"


class _PinnedObjectStore(DiskObjectStore):
    """An object store whose folder, pack folder and alternates were opened by descriptor; dulwich
    never reads its ``info/alternates`` by path."""

    def __init__(self, path: str, *, pack_dir: str | None, alternates: list[_PinnedObjectStore]):
        super().__init__(path)
        if pack_dir is not None:
            self.pack_dir = pack_dir
        self._pinned_alternates = alternates

    @property
    def alternates(self) -> list[_PinnedObjectStore]:
        return self._pinned_alternates


class LocalRepository:
    """A repository opened by ``local_repository_open``: ``repo`` (dulwich, over the pinned
    folders), ``grant`` (the tenant's grant holding it, ``None`` when none was found on the way)
    and ``tip(branch)``. Close it (or use it as a context manager) to release the descriptors."""

    def __init__(self, repo: Repo, *, control_fd: int, fds: list[int], grant: FolderGrant | None, shown: str):
        self.repo, self.grant = repo, grant
        self._control_fd, self._fds, self._shown = control_fd, fds, shown
        self._packed: dict[bytes, bytes] | None = None

    def __enter__(self) -> LocalRepository:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        """Close the repository, then the descriptors it reads through."""
        try:
            self.repo.close()
        finally:
            for fd in self._fds:
                os.close(fd)
            self._fds = []

    # -- refs, read below the control folder's descriptor ----------------------------------------

    def tip(self, branch: str) -> bytes:
        """The commit at the tip of ``branch`` (a local branch, else the one a working copy tracks
        from ``origin``), or of ``HEAD`` when ``branch`` is empty.

        ``SourceUnreachable`` when the branch is missing (naming the branches), the repository has
        no commits, a ref is a link, a hard link or damaged, or the tip is not a commit.
        """
        if branch:
            names = [f"refs/heads/{branch}", f"refs/remotes/origin/{branch}"]
            if not all(_ref_name_ok(name) for name in names):
                raise SourceUnreachable(f"{self._shown}: {branch!r} is not a branch name.", code="invalid_location")
            found = next(((name, tip) for name in names if (tip := self._ref(name)) is not None), None)
            if found is None:
                raise SourceUnreachable(f"{self._shown}: no branch {branch!r} (branches: {self._branches()}).")
            ref, tip = found
        else:
            ref, tip = "HEAD", self._ref("HEAD")
            if tip is None:
                raise SourceUnreachable(f"{self._shown}: the repository has no commits yet.")
        try:
            commit = self.repo.get_object(tip)
        except KeyError:
            raise SourceUnreachable(
                f"{self._shown}: {ref} names a commit the repository lacks (it is damaged)."
            ) from None
        if not isinstance(commit, Commit):
            raise SourceUnreachable(f"{self._shown}: {ref} is not a commit.")
        return tip

    def _ref(self, name: str, depth: int = 0) -> bytes | None:
        """The object id ``name`` (``HEAD`` or ``refs/...``) leads to, following symbolic refs; ``None``
        when it does not exist."""
        data = self._control_file(name, _MAX_REF_BYTES)
        if data is None:
            return self._packed_refs().get(name.encode())
        text = data.strip()
        if text.startswith(b"ref: "):
            target = text[5:].decode("utf-8", errors="replace").strip()
            if depth >= 5 or not _ref_name_ok(target):
                raise SourceUnreachable(f"{self._shown}: the ref {name} points to {target!r}, which is not read.")
            return self._ref(target, depth + 1)
        if not _SHA.fullmatch(text):
            raise SourceUnreachable(f"{self._shown}: the ref {name} is damaged.")
        return text

    def _packed_refs(self) -> dict[bytes, bytes]:
        """``packed-refs`` as ref name -> object id (read once, below the control folder's descriptor)."""
        if self._packed is None:
            data = self._control_file("packed-refs", settings.KB_PARSE_MAX_UNPACKED_MB * 2**20) or b""
            packed: dict[bytes, bytes] = {}
            for line in data.splitlines():
                if line.startswith((b"#", b"^")):
                    continue
                sha, _, name = line.partition(b" ")
                if _SHA.fullmatch(sha) and name:
                    packed[name.strip()] = sha
            self._packed = packed
        return self._packed

    def _control_file(self, name: str, max_bytes: int) -> bytes | None:
        """The file ``name`` below the control folder (no link followed), ``None`` when missing."""
        try:
            return file_read_beneath(self._control_fd, Path(name), max_bytes=max_bytes, grant=self.grant)
        except (FileNotFoundError, NotADirectoryError, IsADirectoryError, NotRegularFile):
            return None
        except LinkedFile as exc:
            raise SourceUnreachable(
                linked_file_message(f"{self._shown}: {name}", exc, self.grant), code=NOT_ALLOWED
            ) from None
        except ValueError:
            raise SourceUnreachable(f"{self._shown}: {name} is too large to be a ref.") from None
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                raise SourceUnreachable(
                    f"{self._shown}: {name} is a link; refs are read without following links.", code=NOT_ALLOWED
                ) from None
            raise SourceUnreachable(f"{self._shown}: {name} cannot be read ({exc.strerror or exc}).") from None

    def _branches(self) -> str:
        """The local branches, for a message: loose ones (read below the descriptor) and packed ones."""
        names = {
            name.removeprefix(b"refs/heads/").decode("utf-8", "replace")
            for name in self._packed_refs()
            if name.startswith(b"refs/heads/")
        }
        names |= _loose_names(self._control_fd, ("refs", "heads"))
        return ", ".join(sorted(names)) or "none"


def _ref_name_ok(name: str) -> bool:
    """``HEAD`` or a well-formed ``refs/...`` name with no ``.`` or ``..`` part (never leaves the control folder)."""
    if name == "HEAD":
        return True
    parts = name.split("/")
    return (
        name.startswith("refs/")
        and all(part not in ("", ".", "..") for part in parts)
        and check_ref_format(name.encode())
    )


def _loose_names(control_fd: int, folder: tuple[str, ...], depth: int = 0) -> set[str]:
    """Names of the regular files below ``folder`` of the control folder, without following links."""
    opened: list[int] = []
    try:
        fd = control_fd
        for part in folder:
            fd = os.open(part, _FOLDER_FLAGS, dir_fd=fd)
            opened.append(fd)
        names: set[str] = set()
        for name in os.listdir(_proc(fd)):
            info = os.stat(name, dir_fd=fd, follow_symlinks=False)
            if stat.S_ISREG(info.st_mode):
                names.add(name)
            elif stat.S_ISDIR(info.st_mode) and depth < 10:
                names |= {f"{name}/{inner}" for inner in _loose_names(fd, (name,), depth + 1)}
        return names
    except OSError:
        return set()
    finally:
        for fd in opened:
            os.close(fd)


def local_repository_open(*, tenant_id: int, path: Path, shown: str, granted: Callable[[str], Path]) -> LocalRepository:
    """Open the repository at the real path ``path`` (checked by the caller: ``granted`` is that
    check, raising ``SourceUnreachable``) by descriptor, as the module docstring says.

    ``SourceUnreachable`` (``shown`` names the location) when it is missing, not a repository, a
    linked worktree, holds a link where a folder should be, or leads outside the tenant's grants.
    """
    fds: list[int] = []
    try:
        try:
            folder_fd, grant = folder_open(tenant=tenant_id, path=path)
        except InvalidInput as exc:
            raise SourceUnreachable(exc.message, code=NOT_ALLOWED) from None
        except FileNotFoundError:
            raise SourceUnreachable(f"{shown}: no such repository (or the workers cannot read it).") from None
        except NotADirectoryError:
            raise SourceUnreachable(f"{shown}: not a git repository.") from None
        fds.append(folder_fd)
        control_fd = _control_open(folder_fd, shown)
        if control_fd != folder_fd:
            fds.append(control_fd)
        if _exists(control_fd, "commondir"):
            raise SourceUnreachable(
                f"{shown}: a linked worktree's control folder is not read; point the source at the main repository."
            )
        store = _store_open(control_fd, "objects", fds, tenant_id=tenant_id, shown=shown, granted=granted, depth=0)
        try:
            repo = Repo(_proc(control_fd), object_store=store, bare=True)
        except OSError as exc:
            raise SourceUnreachable(f"{shown}: the repository cannot be read ({exc.strerror or exc}).") from None
        return LocalRepository(repo, control_fd=control_fd, fds=fds, grant=grant, shown=shown)
    except BaseException:
        for fd in fds:
            os.close(fd)
        raise


def _exists(dir_fd: int, name: str) -> bool:
    try:
        os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except FileNotFoundError:
        return False
    return True


def _folder_below(dir_fd: int, name: str, shown: str, *, missing: str) -> int | None:
    """``name`` below ``dir_fd`` opened as a folder without following a link; ``None`` when it is
    missing and ``missing`` is empty, else ``SourceUnreachable(missing)``."""
    try:
        return os.open(name, _FOLDER_FLAGS, dir_fd=dir_fd)
    except FileNotFoundError:
        if missing:
            raise SourceUnreachable(missing) from None
        return None
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENOTDIR):
            info = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
            if stat.S_ISLNK(info.st_mode):
                raise SourceUnreachable(
                    f"{shown}: {name} is a link; a repository's folders are read without following links.",
                    code=NOT_ALLOWED,
                ) from None
            raise SourceUnreachable(missing or f"{shown}: {name} is not a folder.") from None
        raise SourceUnreachable(f"{shown}: the repository cannot be read ({exc.strerror or exc}).") from None


def _control_open(folder_fd: int, shown: str) -> int:
    """The control folder: ``.git`` below the repository's folder, or the folder itself when bare."""
    not_a_repository = f"{shown}: not a git repository."
    try:
        info = os.stat(".git", dir_fd=folder_fd, follow_symlinks=False)
    except FileNotFoundError:
        for name in ("objects", "refs"):
            try:
                if not stat.S_ISDIR(os.stat(name, dir_fd=folder_fd, follow_symlinks=False).st_mode):
                    raise SourceUnreachable(not_a_repository)
            except FileNotFoundError:
                raise SourceUnreachable(not_a_repository) from None
        return folder_fd
    if stat.S_ISREG(info.st_mode):
        raise SourceUnreachable(
            f"{shown}: .git is a file (a linked worktree or a submodule), which is not read; point the source at "
            "the repository it names."
        )
    control_fd = _folder_below(folder_fd, ".git", shown, missing=not_a_repository)
    assert control_fd is not None
    return control_fd


def _store_open(
    parent_fd: int,
    name: str,
    fds: list[int],
    *,
    tenant_id: int,
    shown: str,
    granted: Callable[[str], Path],
    depth: int,
) -> _PinnedObjectStore:
    """The object store ``name`` below ``parent_fd``, its pack folder and its alternates, pinned;
    every link inside it must lead inside the tenant's grants (``granted``)."""
    objects_fd = _folder_below(parent_fd, name, shown, missing=f"{shown}: not a git repository.")
    assert objects_fd is not None
    fds.append(objects_fd)
    pack_fd = _folder_below(objects_fd, "pack", shown, missing="")
    if pack_fd is not None:
        fds.append(pack_fd)
    for folder, dirs, files in os.walk(_proc(objects_fd)):
        for entry_name in (*dirs, *files):
            entry = Path(folder) / entry_name
            if entry.is_symlink():
                granted(str(entry.resolve()))
    alternates: list[_PinnedObjectStore] = []
    listed = _alternates(objects_fd, shown)
    if listed and depth >= _MAX_ALTERNATES_DEPTH:
        raise SourceUnreachable(f"{shown}: alternates nested too deeply.")
    real_objects = os.readlink(_proc(objects_fd))
    for line in listed:
        target = granted(line if os.path.isabs(line) else os.path.join(real_objects, line))
        try:
            other_fd, _grant = folder_open(tenant=tenant_id, path=target)
        except InvalidInput as exc:
            raise SourceUnreachable(exc.message, code=NOT_ALLOWED) from None
        except OSError:
            raise SourceUnreachable(f"{shown}: the alternate object store {target} cannot be opened.") from None
        fds.append(other_fd)
        alternates.append(
            _store_open(other_fd, ".", fds, tenant_id=tenant_id, shown=shown, granted=granted, depth=depth + 1)
        )
    return _PinnedObjectStore(
        _proc(objects_fd), pack_dir=_proc(pack_fd) if pack_fd is not None else None, alternates=alternates
    )


def _alternates(objects_fd: int, shown: str) -> list[str]:
    """The object stores ``info/alternates`` lists (read without following links)."""
    try:
        data = file_read_beneath(objects_fd, Path("info/alternates"), max_bytes=2**20, grant=None)
    except (FileNotFoundError, NotADirectoryError, NotRegularFile):
        return []
    except (LinkedFile, ValueError, OSError):
        raise SourceUnreachable(
            f"{shown}: objects/info/alternates cannot be read (a link?).", code=NOT_ALLOWED
        ) from None
    lines = (line.strip() for line in data.decode("utf-8", errors="replace").splitlines())
    return [line for line in lines if line and not line.startswith("#")]
