"""Folder grants: the folders on the server a tenant's sources may read, granted by the operator.

A tenant admin is not the operator: a ``folder`` source (or a ``git`` source at a local path or a
``file://`` URL) may only point inside a folder the operator granted to that tenant
(``knowledge.FolderGrant``; ``manage.py folderroots``, ``manage.py source add``, or the admin for
a superuser). The check runs on the real path (symbolic links and ``..`` resolved), on create, on
edit and at every sync, so a location changed in the database, or a grant revoked later, stops
the sync before anything is read.

The data directory (``KB_DATA_DIR``: uploads, git caches, models, the embedded database) can
never be granted, nor any folder inside it or holding it.
"""

from __future__ import annotations

import os
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
    """Grant ``tenant`` the folder ``path`` (stored as its real path); ``(grant, created)``.

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
    try:
        with transaction.atomic():
            grant, created = FolderGrant.objects.get_or_create(
                tenant=tenant, path=str(real), defaults={"granted_by": granted_by[:200]}
            )
    except IntegrityError:  # added meanwhile
        return FolderGrant.objects.get(tenant=tenant, path=str(real)), False
    if created:
        audit_record(action="folder_grant.added", tenant=tenant, obj=grant, changes={"path": str(real)})
    return grant, created


def folder_grant_remove(*, tenant: Tenant, path: str | os.PathLike) -> bool:
    """Revoke the tenant's grant of ``path`` (as given or as its real path); whether one was removed.

    Sources inside it keep their settings but fail their next sync. Recorded in the audit log.
    """
    given = str(path)
    candidates = {given, given.rstrip("/") or "/"}
    try:
        candidates.add(str(path_real(given)))
    except InvalidInput:
        pass
    grants = list(FolderGrant.objects.for_tenant(tenant).filter(path__in=candidates))
    for grant in grants:
        audit_record(action="folder_grant.removed", tenant=tenant, obj=grant, changes={"path": grant.path})
        grant.delete()
    return bool(grants)


def folder_location_check(*, tenant: Tenant | int, location: str) -> Path:
    """The real path of ``location`` if ``tenant`` may read it: inside one of its grants (each
    grant resolved again now) and clear of the data directory. Returns the real path.

    ``InvalidInput`` with code ``location_not_allowed`` otherwise, saying what to ask the operator.
    """
    real = path_real(location)
    tenant_id = tenant if isinstance(tenant, int) else tenant.pk
    grants = FolderGrant.objects.filter(tenant_id=tenant_id).values_list("path", flat=True)
    if not path_in_data_dir(real):
        for granted in grants:
            root = Path(granted).resolve()
            if not path_in_data_dir(root) and real.is_relative_to(root):
                return real
    raise InvalidInput(
        f"{location} is not inside a folder granted to this tenant. Ask the operator to grant it "
        f"(`manage.py folderroots <tenant> --add {real}`).",
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
