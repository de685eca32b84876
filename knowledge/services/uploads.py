"""API uploads: validate and store a file, then ingest it in a Celery task (``IngestionJob``)."""

from __future__ import annotations

import logging
import shutil
import uuid
from pathlib import Path

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from core.errors import InvalidInput, PayloadTooLarge
from knowledge.ingestion.readers import read_bytes
from knowledge.models import (
    IngestionJob,
    Source,
    Tenant,
)
from knowledge.services.ingestion import documents_ingest
from knowledge.services.tenants import source_get_or_create

logger = logging.getLogger(__name__)


# File systems limit a name to 255 bytes (not characters): 300 CJK characters are 900 bytes.
_MAX_STORED_NAME_BYTES = 200
_MAX_SUFFIX_BYTES = 20


def _safe_file_name(file_name: str) -> str:
    """A file name safe to store on disk: no folders, no odd characters, at most 200 bytes, its suffix kept."""
    from django.core.exceptions import SuspiciousFileOperation
    from django.utils.text import get_valid_filename

    base = Path(file_name.replace("\\", "/")).name
    try:
        safe = Path(get_valid_filename(base))
    except SuspiciousFileOperation:
        safe = Path("upload" + Path(base).suffix.lower())
    suffix = _utf8_prefix(safe.suffix, _MAX_SUFFIX_BYTES)
    return _utf8_prefix(safe.stem, _MAX_STORED_NAME_BYTES - len(suffix.encode())) + suffix


def _utf8_prefix(text: str, limit: int) -> str:
    """The longest prefix of ``text`` that is at most ``limit`` bytes of UTF-8 (whole characters)."""
    return text.encode("utf-8")[:limit].decode("utf-8", "ignore")


def upload_ingest(*, tenant: Tenant, source_name: str, file_name: str, data: bytes, options: dict) -> IngestionJob:
    """Validate an uploaded file, store it and queue its ingestion. Returns the ``IngestionJob``.

    ``options`` may hold ``format`` (a reader, e.g. "rst"), ``external_id`` and ``title``.
    Everything is checked before anything is stored: ``PayloadTooLarge`` over
    ``KB_MAX_UPLOAD_BYTES``, ``UnsupportedFileType`` for an unknown type and ``InvalidInput``
    for an empty, binary or malformed file. The task runs once the job row is committed.
    """
    if len(data) > settings.KB_MAX_UPLOAD_BYTES:
        raise PayloadTooLarge(f"{file_name}: the file is larger than {settings.KB_MAX_UPLOAD_BYTES} bytes.")
    if not source_name.strip():
        raise InvalidInput("A source needs a name.")
    options = {k: v for k, v in options.items() if v not in (None, "")}
    read_bytes(data, name=file_name, fmt=options.get("format"))

    folder = Path(settings.KB_DATA_DIR) / "uploads" / tenant.slug / uuid.uuid4().hex
    stored = folder / _safe_file_name(file_name)
    try:  # any failure from here on leaves no folder behind
        folder.mkdir(parents=True)
        stored.write_bytes(data)
        with transaction.atomic():
            source = source_get_or_create(tenant=tenant, name=source_name, kind=Source.Kind.UPLOAD)
            job = IngestionJob.objects.create(
                tenant=tenant,
                source=source,
                file_name=Path(file_name.replace("\\", "/")).name.replace("\x00", "")[:500],
                stored_path=str(stored),
                options=options,
            )
    except Exception:
        shutil.rmtree(folder, ignore_errors=True)
        raise
    from knowledge.tasks import ingestion_job_task

    transaction.on_commit(lambda: ingestion_job_task.delay(job.pk))
    # Without a broker the task has already run eagerly at commit: report its outcome.
    job.refresh_from_db()
    return job


def ingestion_job_run(*, job_id: int) -> IngestionJob:
    """Run a pending ``IngestionJob``: ingest its stored file, record the result or the error."""
    claimed = IngestionJob.objects.filter(pk=job_id, status=IngestionJob.Status.PENDING).update(
        status=IngestionJob.Status.RUNNING
    )
    job = IngestionJob.objects.select_related("tenant", "source").get(pk=job_id)
    if not claimed:
        return job
    try:
        options = job.options or {}
        stored = Path(job.stored_path)
        # The uri is the name the file was uploaded as, never the server's path (JSONL lines
        # carry their own).
        documents = read_bytes(
            stored.read_bytes(),
            name=stored.name,
            external_id=stored.name if stored.suffix.lower() == ".jsonl" else stored.stem,
            uri=job.file_name,
            fmt=options.get("format"),
        )
        if len(documents) == 1:  # a JSONL file names its documents itself
            documents[0].external_id = options.get("external_id") or job.file_name
            documents[0].title = options.get("title") or documents[0].title
        report = documents_ingest(tenant=job.tenant, source=job.source, documents=documents)
        job.status, job.result = IngestionJob.Status.DONE, report.as_dict()
    except Exception as exc:  # recorded on the job; the task does not retry bad input
        logger.exception("Ingestion job %s failed", job_id)
        job.status, job.error = (
            IngestionJob.Status.FAILED,
            str(getattr(exc, "message", exc)),
        )
    job.finished_at = timezone.now()
    job.save(update_fields=["status", "result", "error", "finished_at"])
    return job
