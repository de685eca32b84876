"""Several files uploaded at once (the portal's upload form): one ``IngestionJob`` per file.

Each file goes through ``upload_ingest`` on its own, so a file that is refused (unsupported type,
empty, damaged, an archive bomb) is reported with its message while the other files of the same
submission are still stored and queued. A file over the upload limit never gets here: the web
request's upload handler stops the whole submission while it streams in (``core.uploads``). The
files go into a source of kind ``upload``: an existing one, or a new one created under the given
name; a name taken by another kind of source (one filled by ``manage.py ingest`` or a dataset, or
kept in sync by a connector) is refused before any file is read, so an upload never mixes into a
folder, web or git source.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from django.conf import settings

from core.errors import ApplicationError, InvalidInput, PermissionDenied
from core.memberships import membership_get
from core.models import Tenant
from knowledge.access import access_scope_get, sources_visible
from knowledge.models import IngestionJob, Source
from knowledge.services.uploads import upload_ingest

# Files per submission: enough for a folder's worth, well under Django's DATA_UPLOAD_MAX_NUMBER_FILES.
MAX_FILES_PER_UPLOAD = 20


class UploadedFile(Protocol):
    """What a file of the batch offers: Django's ``UploadedFile`` does."""

    name: str

    def read(self, size: int = -1) -> bytes: ...


@dataclass(frozen=True)
class UploadOutcome:
    """One file of a batch: its ``job`` when it was accepted, else ``error`` says why not."""

    file_name: str
    job: IngestionJob | None = None
    error: str = ""


def upload_source_check(*, tenant: Tenant, user, source_name: str) -> str:
    """``source_name`` stripped, if files may be uploaded into it: a new name, or one of the
    tenant's upload sources that ``user`` may see. ``InvalidInput`` otherwise (the same words for a
    hidden source as for a source of another kind: the answer tells nothing about what is hidden)."""
    name = source_name.strip()
    if not name:
        raise InvalidInput("Pick an upload source or type a name for a new one.", code="source_required")
    if len(name) > 200:
        raise InvalidInput("A source name has at most 200 characters.", code="source_name_too_long")
    existing = Source.objects.for_tenant(tenant).filter(name=name).first()
    if existing is None:
        return name
    visible = sources_visible(Source.objects.for_tenant(tenant), access_scope_get(tenant=tenant, user=user))
    if existing.kind != Source.Kind.UPLOAD or not visible.filter(pk=existing.pk).exists():
        raise InvalidInput(
            f"The name {name!r} belongs to a source that does not take uploads; pick an upload source "
            "or type another name.",
            code="not_an_upload_source",
        )
    return name


def upload_batch_ingest(*, tenant: Tenant, user, source_name: str, files: list[UploadedFile]) -> list[UploadOutcome]:
    """Upload ``files`` into the upload source ``source_name`` (created if new) for ``user``, an
    editor, admin or owner of ``tenant``: one ``IngestionJob`` per accepted file (already run
    without a broker), one ``UploadOutcome`` per file in the order given.

    ``PermissionDenied`` for a lesser role; ``InvalidInput`` (nothing stored) for no file, more
    than ``MAX_FILES_PER_UPLOAD`` or a source that does not take uploads (``upload_source_check``).
    A file refused by ``upload_ingest`` is an outcome with its ``error``.
    """
    if not membership_get(user=user, tenant=tenant).can_edit:
        raise PermissionDenied("Only editors, admins and owners may upload documents.")
    if not files:
        raise InvalidInput("Choose at least one file to upload.", code="no_files")
    if len(files) > MAX_FILES_PER_UPLOAD:
        raise InvalidInput(
            f"Upload at most {MAX_FILES_PER_UPLOAD} files at once ({len(files)} were chosen).", code="too_many_files"
        )
    name = upload_source_check(tenant=tenant, user=user, source_name=source_name)
    outcomes = []
    for file in files:
        file_name = file.name or "unnamed"
        # One byte past the limit is enough for upload_ingest to refuse an oversized file.
        data = file.read(settings.KB_MAX_UPLOAD_BYTES + 1)
        try:
            job = upload_ingest(tenant=tenant, source_name=name, file_name=file_name, data=data, options={})
        except ApplicationError as exc:
            message = exc.message if exc.message.startswith(file_name) else f"{file_name}: {exc.message}"
            outcomes.append(UploadOutcome(file_name=file_name, error=message))
        else:
            outcomes.append(UploadOutcome(file_name=file_name, job=job))
    return outcomes
