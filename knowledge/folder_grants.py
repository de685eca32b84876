"""Folder grants: the folders on the server a tenant's sources may read, granted by the operator.

A tenant admin is not the operator: a ``folder`` source (or a ``git`` source at a local path or a
``file://`` URL) may only point inside a folder the operator granted to that tenant
(``knowledge.FolderGrant``; ``manage.py folderroots``, ``manage.py source add``, or the admin for
a superuser). The check runs on the real path (symbolic links and ``..`` resolved), on create, on
edit and at every sync, so a location changed in the database, or a grant revoked later, stops
the sync before anything is read.

A grant is pinned to the folder granted: its path as stored (a real path, never resolved again)
and the folder's device and inode. A granted path later replaced by a link, or by another
folder, is refused with a message saying so (``folder_grant_moved``), and ``folder_open`` opens a
location one component at a time from ``/`` without following links, checking each granted
folder on the way by its descriptor, so a swap between the check and the open is refused too.

The data directory (``KB_DATA_DIR``: uploads, git caches, models, the embedded database) can
never be granted, nor any folder inside it or holding it.
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

from django.conf import settings
from django.db import IntegrityError, transaction

from core.audit import audit_record
from core.errors import InvalidInput
from core.models import Tenant
from knowledge.models import FolderGrant

NOT_ALLOWED = "location_not_allowed"


def path_real(location: str | os.PathLike) -> Path:
    """``location`` as an absolute real path: ``~`` expanded, symbolic links and ``..`` resolved
    (as far as the path exists). ``InvalidInput`` for a relative path."""
    path = Path(os.path.expanduser(str(location)))
    if not path.is_absolute():
        raise InvalidInput(f"{location!r} is not an absolute path.", code="invalid_location")
    return path.resolve()


def data_dir() -> Path:
    """The data directory's real path."""
    return Path(settings.KB_DATA_DIR).resolve()


def path_in_data_dir(path: Path) -> bool:
    """Whether the real ``path`` is the data directory, inside it, or holds it."""
    data = data_dir()
    return path == data or path.is_relative_to(data) or data.is_relative_to(path)


def folder_grant_list(*, tenant: Tenant) -> list[FolderGrant]:
    """The tenant's grants, by path."""
    return list(FolderGrant.objects.for_tenant(tenant).order_by("path"))


def folder_grant_add(*, tenant: Tenant, path: str | os.PathLike, granted_by: str) -> tuple[FolderGrant, bool]:
    """Grant ``tenant`` the folder ``path`` (stored as its real path, pinned to the folder's device
    and inode); ``(grant, created)``. Granting an existing grant again pins it to the folder now at
    its path (after the operator checked a folder that was replaced: ``folder_grant_moved``).

    ``InvalidInput`` for a relative path, one that is not a folder, or one inside or holding the
    data directory (code ``location_not_allowed``). Recorded in the audit log.
    """
    real = path_real(path)
    if path_in_data_dir(real):
        raise InvalidInput(
            f"{real} is or holds the data directory ({data_dir()}), which holds every tenant's uploads and "
            "caches; it can never be granted.",
            code=NOT_ALLOWED,
        )
    if not real.is_dir():
        raise InvalidInput(f"{real}: no such folder.", code="invalid_location")
    info = os.stat(real)
    pin = {"device": info.st_dev, "inode": info.st_ino}
    try:
        with transaction.atomic():
            grant, created = FolderGrant.objects.get_or_create(
                tenant=tenant, path=str(real), defaults={"granted_by": granted_by[:200], **pin}
            )
    except IntegrityError:  # added meanwhile
        grant, created = FolderGrant.objects.get(tenant=tenant, path=str(real)), False
    if created:
        audit_record(action="folder_grant.added", tenant=tenant, obj=grant, changes={"path": str(real)})
    elif _pin(grant) != (info.st_dev, info.st_ino):
        before = {"device": _number(grant.device), "inode": _number(grant.inode)}
        grant.device, grant.inode = info.st_dev, info.st_ino
        grant.save(update_fields=["device", "inode"])
        audit_record(
            action="folder_grant.repinned",
            tenant=tenant,
            obj=grant,
            changes={"path": grant.path, **{key: [before[key], pin[key]] for key in pin}},
        )
    return grant, created


def folder_grant_hard_links(*, tenant: Tenant, path: str | os.PathLike, allowed: bool) -> FolderGrant:
    """Let the sources inside the tenant's grant of ``path`` read files with several hard links or on
    another file system than the folder (``allowed``), or stop them (the default). Operators only
    (``manage.py folderroots --allow-hard-links``); recorded in the audit log.

    ``InvalidInput`` (code ``invalid_location``) when ``path`` is not granted to the tenant.
    """
    grant = _grant_named(tenant=tenant, path=path)
    if grant is None:
        raise InvalidInput(f"{path} is not granted to {tenant.slug}; grant it first (--add).", code="invalid_location")
    if grant.allow_hard_links != allowed:
        audit_record(
            action="folder_grant.changed",
            tenant=tenant,
            obj=grant,
            changes={"path": grant.path, "allow_hard_links": [grant.allow_hard_links, allowed]},
        )
        grant.allow_hard_links = allowed
        grant.save(update_fields=["allow_hard_links"])
    return grant


def _grant_named(*, tenant: Tenant, path: str | os.PathLike) -> FolderGrant | None:
    """The tenant's grant of ``path`` as given or as its real path, if any."""
    given = str(path)
    candidates = {given, given.rstrip("/") or "/"}
    try:
        candidates.add(str(path_real(given)))
    except InvalidInput:
        pass
    return FolderGrant.objects.for_tenant(tenant).filter(path__in=candidates).order_by("pk").first()


def folder_grant_remove(*, tenant: Tenant, path: str | os.PathLike) -> bool:
    """Revoke the tenant's grant of ``path`` (as given or as its real path); whether one was removed.

    Sources inside it keep their settings but fail their next sync. Recorded in the audit log.
    """
    removed = False
    while (grant := _grant_named(tenant=tenant, path=path)) is not None:
        audit_record(action="folder_grant.removed", tenant=tenant, obj=grant, changes={"path": grant.path})
        grant.delete()
        removed = True
    return removed


def _number(value) -> int | None:
    return None if value is None else int(value)


def _pin(grant: FolderGrant) -> tuple[int | None, int | None]:
    return _number(grant.device), _number(grant.inode)


def folder_grant_moved(grant: FolderGrant, info: os.stat_result | None) -> str:
    """Why the folder at ``grant.path`` is no longer the folder granted, or "" when it still is.

    ``info`` is what ``os.lstat`` (or ``os.fstat`` of a descriptor opened without following links)
    says of ``grant.path`` now, ``None`` when it is missing (not a replacement: there is nothing to
    read). A grant pinned before pins existed is pinned now, from ``info``, if its path is still a
    folder and still its own real path.
    """
    if info is None:
        return ""  # gone: nothing to read there, which the caller says (a folder back later is checked then)
    if stat.S_ISLNK(info.st_mode):
        try:
            target = os.readlink(grant.path)
        except OSError:
            target = "elsewhere"
        return f"has been replaced by a link (to {target})"
    if not stat.S_ISDIR(info.st_mode):
        return "is no longer a folder"
    if grant.device is None or grant.inode is None:
        if os.path.realpath(grant.path) != grant.path:
            return "now leads elsewhere through a link above it"
        grant.device, grant.inode = info.st_dev, info.st_ino
        FolderGrant.objects.filter(pk=grant.pk, device__isnull=True).update(device=info.st_dev, inode=info.st_ino)
        return ""
    if _pin(grant) != (info.st_dev, info.st_ino):
        return "has been replaced by another folder"
    return ""


def _moved_error(grant: FolderGrant, why: str) -> InvalidInput:
    return InvalidInput(
        f"{grant.path}, the folder granted to this tenant, {why} since it was granted; nothing is read "
        "through it. Ask the operator to check the folder and grant it again "
        f"(`manage.py folderroots <tenant> --add {grant.path}`).",
        code=NOT_ALLOWED,
    )


def _lstat(path: str) -> os.stat_result | None:
    try:
        return os.lstat(path)
    except OSError:
        return None


def folder_location_check(*, tenant: Tenant | int, location: str) -> Path:
    """The real path of ``location`` if ``tenant`` may read it: inside one of its grants (the
    grant's path as granted, never resolved again) that is still the folder granted
    (``folder_grant_moved``), and clear of the data directory. Returns the real path.

    ``InvalidInput`` with code ``location_not_allowed`` otherwise: saying what to ask the
    operator, or that the granted folder was replaced (by a link, by another folder).
    """
    real = path_real(location)
    given = Path(os.path.abspath(os.path.expanduser(str(location))))
    tenant_id = tenant if isinstance(tenant, int) else tenant.pk
    grants = list(FolderGrant.objects.filter(tenant_id=tenant_id).order_by("path"))
    moved: list[tuple[FolderGrant, str]] = []
    for grant in grants:
        root = Path(grant.path)
        if not (real.is_relative_to(root) or given.is_relative_to(root)):
            continue
        why = folder_grant_moved(grant, _lstat(grant.path))
        if why:
            moved.append((grant, why))
        elif real.is_relative_to(root) and not path_in_data_dir(root) and not path_in_data_dir(real):
            return real
    if moved:
        raise _moved_error(*moved[-1])
    raise InvalidInput(
        f"{location} is not inside a folder granted to this tenant. Ask the operator to grant it "
        f"(`manage.py folderroots <tenant> --add {real}`).",
        code=NOT_ALLOWED,
    )


_WALK_FLAGS = getattr(os, "O_PATH", os.O_RDONLY) | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


def folder_open(*, tenant: Tenant | int, path: Path) -> tuple[int, FolderGrant | None]:
    """A descriptor of the folder at the real path ``path`` (checked by ``folder_location_check``),
    opened one component at a time from ``/`` without following any link, and the innermost of the
    tenant's grants on the way (``None`` when there is none). Each granted folder on the way must
    still be the folder granted: its descriptor's device and inode are compared with the grant's.
    The descriptor is an ``O_PATH`` one (use it as ``dir_fd``, or as ``/proc/self/fd/N``); the
    caller closes it.

    ``InvalidInput`` (code ``location_not_allowed``) when a link or a replaced folder is found on
    the way (a swap after the check); ``FileNotFoundError`` when the folder is gone,
    ``NotADirectoryError`` when it (or a folder on the way) is a file; ``OSError`` when it cannot
    be opened.
    """
    tenant_id = tenant if isinstance(tenant, int) else tenant.pk
    grants = {Path(g.path): g for g in FolderGrant.objects.filter(tenant_id=tenant_id)}
    if not path.is_absolute():
        raise InvalidInput(f"{path} is not an absolute path.", code="invalid_location")
    found: FolderGrant | None = None
    fd = os.open("/", _WALK_FLAGS)
    try:
        current = Path("/")
        for part in (None, *path.parts[1:]):
            if part is not None:
                try:
                    inner = os.open(part, _WALK_FLAGS, dir_fd=fd)
                except OSError as exc:
                    if exc.errno not in (errno.ELOOP, errno.ENOTDIR):
                        raise
                    if stat.S_ISLNK(os.stat(part, dir_fd=fd, follow_symlinks=False).st_mode):
                        raise _swapped(path, current / part) from None
                    raise NotADirectoryError(errno.ENOTDIR, "not a folder", str(current / part)) from None
                os.close(fd)
                fd = inner
                current = current / part
                if not stat.S_ISDIR(os.fstat(fd).st_mode):  # O_PATH | O_NOFOLLOW may open a link itself
                    raise _swapped(path, current)
            grant = grants.get(current)
            if grant is not None:
                why = folder_grant_moved(grant, os.fstat(fd))
                if why:
                    raise _moved_error(grant, why)
                found = grant
    except BaseException:
        os.close(fd)
        raise
    return fd, found


def _swapped(path: Path, where: Path) -> InvalidInput:
    return InvalidInput(
        f"{path} changed while it was being opened: {where} is now a link; nothing is read.",
        code=NOT_ALLOWED,
    )


def path_inside(path: Path, root: Path) -> bool:
    """Whether the real path of ``path`` stays inside the real folder ``root`` and out of the data
    directory (a symbolic link or ``..`` leading out is not)."""
    try:
        real = path.resolve()
    except (OSError, RuntimeError):  # a loop of links
        return False
    return real.is_relative_to(root) and not path_in_data_dir(real)
