"""Ingestion jobs: API uploads (and files queued by ``manage.py ingest --async``) ingested by a
Celery task (``IngestionJob``).

A job stores all of its documents or none. A worker running a job holds a lease on it
(``worker_id``, ``lease_expires_at``), renewed by a heartbeat thread every third of
``KB_JOB_LEASE_S``; a job whose lease ran out (its worker was killed) is taken over by the next
delivery of its task (Redis redelivers an unacknowledged message after the visibility timeout) or
re-queued by ``ingestion_jobs_recover`` (Celery beat). Claims are conditional UPDATEs, so two
workers never run one job at once (the claim-by-conditional-UPDATE habit of healthchecks'
``sendalerts``).

An upload is checked cheaply in the web request (``read_check``: type, signature, declared sizes,
text decoding) and parsed by its job, the formats that decompress in a sandboxed child process
(``knowledge.ingestion.sandbox``). The stored file (``KB_DATA_DIR/uploads/<tenant>/<random>/``)
is only needed until its job ends: it is removed once the job is ``done`` or ``failed`` (the
document's text lives on in its versions; nothing reads the file again), and with its source or
document when those are deleted first (``upload_files_remove``), each once the transaction
commits. A job put back to ``pending`` for a retry keeps its file.

OCR on workers of its own: while ``KB_OCR_QUEUE`` names a queue, a job parses its file with OCR
deferred (``knowledge.ingestion.ocr.ocr_deferred``). A file that needs OCR (a PDF page without a
text layer, a picture in an office file) stops its parse at the first such page
(``OcrDeferred``); the job goes back to ``pending`` marked ``options["ocr"]`` (the attempt not
counted) and is queued once more, on that queue, whose workers parse it with OCR. Other files are
parsed where they are. With ``KB_OCR_QUEUE`` empty, OCR runs inline, in the job's own parse.
"""

from __future__ import annotations

import logging
import os
import shutil
import socket
import time
import uuid
from collections.abc import Iterable
from functools import partial
from pathlib import Path

from django.conf import settings
from django.db import DatabaseError, InterfaceError, OperationalError, connection, transaction
from django.db.models import F, Q
from django.utils import timezone

from core import metrics
from core.errors import ApplicationError, InvalidInput, PayloadTooLarge, UpstreamError
from core.models import Tenant
from core.queue import task_send
from core.uploads import size_text
from knowledge import task_names
from knowledge.ingestion.ocr import OcrDeferred, ocr_deferred
from knowledge.ingestion.readers import read_bytes, read_check, read_path
from knowledge.ingestion.splitters import get_splitter
from knowledge.models import Document, IngestionJob, Source
from knowledge.quotas import quota_check, quota_check_early
from knowledge.services.ingestion import IngestReport, collect_files, documents_ingest
from knowledge.services.leases import LeaseHeartbeat, lease_claim_or_busy
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


def _quota_check_early(*, tenant: Tenant, file_name: str, options: dict) -> None:
    """Refuse now (``QuotaExceeded``) an upload that would add a document to a tenant at its
    documents quota; the job checks exactly (documents, bytes, chunks) before it stores anything.
    A new version of a document the tenant has, and a JSONL file (its ids are in its lines), pass here."""
    if Path(file_name).suffix.lower() == ".jsonl":
        return
    external_id = options.get("external_id") or Path(file_name.replace("\\", "/")).name.replace("\x00", "")[:500]
    if not Document.objects.for_tenant(tenant).filter(external_id=external_id).exists():
        quota_check_early(tenant=tenant, documents=1)


def upload_ingest(*, tenant: Tenant, source_name: str, file_name: str, data: bytes, options: dict) -> IngestionJob:
    """Check an uploaded file cheaply, store it and queue its ingestion. Returns the ``IngestionJob``.

    ``options`` may hold ``format`` (a reader, e.g. "rst"), ``external_id`` and ``title``.
    Nothing is stored unless the checks of ``read_check`` pass: ``PayloadTooLarge`` over
    ``KB_MAX_UPLOAD_BYTES``, ``UnsupportedFileType`` for an unknown type and ``InvalidInput``
    for an empty, binary, malformed, mislabelled or encrypted file, or a zip whose declared sizes
    pass the caps (``archive_bomb``). The file is parsed by the job, which runs once the job row
    is committed (without a broker, before this returns): a file that fails there (a PDF past a
    cap, a parse that runs out of time or memory) is a ``failed`` job that stored nothing.
    """
    if len(data) > settings.KB_MAX_UPLOAD_BYTES:
        raise PayloadTooLarge(
            f"{file_name}: the file is larger than {size_text(settings.KB_MAX_UPLOAD_BYTES)} (the limit for one file)."
        )
    if not source_name.strip():
        raise InvalidInput("A source needs a name.")
    options = {k: v for k, v in options.items() if v not in (None, "")}
    read_check(data, name=file_name, fmt=options.get("format"))
    _quota_check_early(tenant=tenant, file_name=file_name, options=options)

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
    transaction.on_commit(partial(_job_enqueue, job.pk))
    # Without a broker the task has already run eagerly at commit: report its outcome.
    job.refresh_from_db()
    return job


# Failures worth retrying: the database or the embedding endpoint was unreachable for a while.
TRANSIENT_ERRORS = (OperationalError, InterfaceError, UpstreamError)


class IngestionJobBusy(Exception):
    """The job is running under another worker's live lease; try again in ``retry_in`` seconds."""

    def __init__(self, job_id: int, retry_in: float):
        super().__init__(f"Ingestion job {job_id} is running elsewhere; its lease ends in {retry_in:.0f} s.")
        self.retry_in = retry_in


def _job_enqueue(job_id: int, *, queue: str | None = None) -> None:
    """Queue the job's task (run it, without a broker), on ``queue`` if given. A job that cannot be
    queued (broker down), or whose eager run gave up, is marked failed rather than left pending."""
    try:
        task_send(task_names.INGESTION_JOB, job_id, queue=queue)
    except Exception:
        logger.exception("Could not queue or run ingestion job %s", job_id)
        ingestion_job_fail(job_id=job_id, message="The job could not be queued or run (is the broker running?).")


def worker_id_default() -> str:
    """This process's worker id for leases: ``<host>/<pid>``."""
    return f"{socket.gethostname()}/{os.getpid()}"[:200]


def paths_enqueue(
    *,
    tenant: Tenant,
    source: Source,
    paths: Iterable[Path],
    fmt: str | None = None,
    uri_prefix: str = "",
    root: Path | None = None,
    exclude: Iterable[str] = (),
    splitter: dict | None = None,
) -> list[IngestionJob]:
    """Queue one ``IngestionJob`` per file under ``paths`` (``manage.py ingest --async``). Returns the jobs.

    Every file is read and validated first, so a bad file (``InvalidInput``,
    ``UnsupportedFileType``) queues nothing. The jobs name the files by absolute path: workers
    must see the same file system. ``splitter`` is ``{"name": ..., **options}`` for
    ``get_splitter``. Document ids and URIs are the ones ``paths_ingest`` would give.
    """
    if source.tenant_id != tenant.pk:
        raise InvalidInput("The source belongs to another tenant.")
    files = collect_files(paths, root=root, exclude=exclude)
    for file, base in files:
        read_path(file, root=base, uri_prefix=uri_prefix, fmt=fmt)
        if len(str(file)) > 2000:
            raise InvalidInput(f"{file}: the path is longer than 2,000 characters.")
    with transaction.atomic():
        if source.pk is None:
            quota_check(tenant=tenant, sources=1)
            source.save()
        jobs = [
            IngestionJob.objects.create(
                tenant=tenant,
                source=source,
                file_name=str(file.relative_to(base))[:500],
                stored_path=str(file),
                options={
                    "reader": "path",
                    "root": str(base),
                    "uri_prefix": uri_prefix,
                    "format": fmt,
                    "splitter": splitter or {},
                },
            )
            for file, base in files
        ]
        for job in jobs:
            transaction.on_commit(partial(_job_enqueue, job.pk))
    return jobs


def _job_queue(options: dict | None) -> str | None:
    """The queue of a job with these options: ``KB_OCR_QUEUE`` once it was found to need OCR."""
    return (settings.KB_OCR_QUEUE or None) if (options or {}).get("ocr") else None


def _job_documents(job: IngestionJob) -> list:
    """Read the job's file, with OCR deferred (``OcrDeferred``) while ``KB_OCR_QUEUE`` is set and
    the job is not on it yet."""
    with ocr_deferred(bool(settings.KB_OCR_QUEUE) and not (job.options or {}).get("ocr")):
        return _job_read(job)


def _job_read(job: IngestionJob) -> list:
    """Read the job's file: an upload (named after its file) or a queued path (``paths_enqueue``)."""
    options = job.options or {}
    stored = Path(job.stored_path)
    if not stored.is_file():
        raise InvalidInput(
            f"{job.file_name}: the file is gone from {'its folder' if options.get('reader') == 'path' else 'the upload store'}."
        )
    if options.get("reader") == "path":
        return read_path(
            stored, root=Path(options["root"]), uri_prefix=options.get("uri_prefix", ""), fmt=options.get("format")
        )
    # The uri is the name the file was uploaded as, never the server's path (JSONL lines carry
    # their own).
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
    return documents


def _job_splitter(job: IngestionJob):
    spec = dict((job.options or {}).get("splitter") or {})
    return get_splitter(spec.pop("name"), **spec) if spec.get("name") else None


class _ProgressRecorder:
    """Writes ``documents_ingest``'s progress to the job, at most once a second (and on each new stage)."""

    def __init__(self, job_id: int, worker_id: str):
        self.job_id, self.worker_id = job_id, worker_id
        self._last_write, self._last_stage = 0.0, ""

    def __call__(self, progress: dict) -> None:
        now = time.monotonic()
        if progress["stage"] == self._last_stage and now - self._last_write < 1.0:
            return
        self._last_write, self._last_stage = now, progress["stage"]
        IngestionJob.objects.filter(
            pk=self.job_id, worker_id=self.worker_id, status=IngestionJob.Status.RUNNING
        ).update(progress=progress)


def _job_finish(job_id: int, worker_id: str, *, status: str, result: dict, error: str) -> bool:
    """Record the outcome if ``worker_id`` still holds the job; False if another worker took it over."""
    return bool(
        IngestionJob.objects.filter(pk=job_id, worker_id=worker_id, status=IngestionJob.Status.RUNNING).update(
            status=status,
            result=result,
            error=error,
            finished_at=timezone.now(),
            lease_expires_at=None,
        )
    )


def ingestion_job_run(*, job_id: int, worker_id: str | None = None) -> IngestionJob | None:
    """Run ``IngestionJob`` ``job_id`` under a lease; returns the job as it ended (None if deleted).

    The job is claimed if it is pending or its lease ran out (its worker died); a job that is
    done or failed is returned as it is, and one running under a live lease raises
    ``IngestionJobBusy`` (retry later). All of the file's documents are stored or none:
    ``done`` with every document in ``result``, or ``failed`` with ``error`` saying why and that
    nothing was stored (database messages are only logged). A temporary failure (one of
    ``TRANSIENT_ERRORS``) puts the job back to ``pending`` and is re-raised, for the task to
    retry; a job started ``KB_JOB_MAX_ATTEMPTS`` times is failed.
    """
    worker_id = worker_id or worker_id_default()
    job, claimed = lease_claim_or_busy(
        IngestionJob, job_id, worker_id, busy=IngestionJobBusy, related=("tenant", "source")
    )
    if job is None or not claimed:
        return job
    nothing = IngestReport().as_dict()
    if job.attempts > settings.KB_JOB_MAX_ATTEMPTS:
        if _job_finish(
            job_id,
            worker_id,
            status=IngestionJob.Status.FAILED,
            result=nothing,
            error=(
                f"The job was started {job.attempts - 1} times and never finished (its worker stopped each "
                "time, e.g. killed for memory). Nothing from this file was stored."
            ),
        ):
            upload_files_remove(jobs=[job])
            metrics.ingestion_job_observe(status=IngestionJob.Status.FAILED)
        job.refresh_from_db()
        return job
    with LeaseHeartbeat(IngestionJob, job_id, worker_id):
        try:
            report = documents_ingest(
                tenant=job.tenant,
                source=job.source,
                documents=_job_documents(job),
                splitter=_job_splitter(job),
                on_progress=_ProgressRecorder(job_id, worker_id),
            )
        except TRANSIENT_ERRORS as exc:
            _job_release(job_id, worker_id, exc)
            metrics.ingestion_job_observe(status="retry")
            raise
        except OcrDeferred:
            _job_to_ocr_queue(job, worker_id)
            job.refresh_from_db()
            return job
        except ApplicationError as exc:
            status, result, error = (
                IngestionJob.Status.FAILED,
                {**nothing, "error_code": exc.code},
                f"{exc.message} Nothing from this file was stored.",
            )
        except Exception:
            logger.exception("Ingestion job %s failed", job_id)
            status, result, error = (
                IngestionJob.Status.FAILED,
                nothing,
                "Ingestion failed unexpectedly (the details are in the server log). Nothing from this file was stored.",
            )
        else:
            status, result, error = IngestionJob.Status.DONE, report.as_dict(), ""
    if _job_finish(job_id, worker_id, status=status, result=result, error=error):
        upload_files_remove(jobs=[job])  # done or failed: the file is not read again
        metrics.ingestion_job_observe(status=status)
    else:
        logger.warning("Ingestion job %s was taken over by another worker; its outcome is theirs to record", job_id)
    job.refresh_from_db()
    return job


def _job_to_ocr_queue(job: IngestionJob, worker_id: str) -> None:
    """The job's file needs OCR: back to ``pending``, marked for OCR (this attempt not counted),
    and queued on ``KB_OCR_QUEUE`` once committed. Nothing if ``worker_id`` lost the job."""
    with transaction.atomic():
        moved = IngestionJob.objects.filter(pk=job.pk, worker_id=worker_id, status=IngestionJob.Status.RUNNING).update(
            status=IngestionJob.Status.PENDING,
            worker_id="",
            lease_expires_at=None,
            progress={},
            attempts=F("attempts") - 1,
            options={**(job.options or {}), "ocr": True},
        )
        if moved:
            logger.info("Ingestion job %s needs OCR; it goes to queue %s", job.pk, settings.KB_OCR_QUEUE)
            transaction.on_commit(partial(_job_enqueue, job.pk, queue=settings.KB_OCR_QUEUE))


def _job_release(job_id: int, worker_id: str, exc: Exception) -> None:
    """After a temporary failure: the job goes back to ``pending`` (nothing was stored) for a retry."""
    logger.warning("Ingestion job %s met a temporary failure; it will be retried", job_id, exc_info=True)
    message = exc.message if isinstance(exc, ApplicationError) else "the database was unreachable"
    try:
        if not connection.in_atomic_block:  # a broken connection is replaced before the update
            connection.close_if_unusable_or_obsolete()
        IngestionJob.objects.filter(pk=job_id, worker_id=worker_id, status=IngestionJob.Status.RUNNING).update(
            status=IngestionJob.Status.PENDING,
            worker_id="",
            lease_expires_at=None,
            progress={},
            error=f"Temporary failure ({message}); nothing was stored and the job will be retried.",
        )
    except DatabaseError:  # the lease runs out instead, and the retry takes the job over
        logger.warning("Could not release ingestion job %s", job_id, exc_info=True)


def ingestion_job_fail(*, job_id: int, message: str) -> bool:
    """Mark a job failed after its task gave up (retries spent), unless a live worker holds it.

    Returns whether the job was marked. Nothing is stored by a job that did not finish.
    """
    now = timezone.now()
    claimable = Q(status=IngestionJob.Status.PENDING) | Q(status=IngestionJob.Status.RUNNING, lease_expires_at__lt=now)
    marked = bool(
        IngestionJob.objects.filter(claimable, pk=job_id).update(
            status=IngestionJob.Status.FAILED,
            result=IngestReport().as_dict(),
            error=f"{message} Nothing from this file was stored.",
            worker_id="",
            lease_expires_at=None,
            finished_at=now,
        )
    )
    if marked:
        upload_files_remove(jobs=IngestionJob.objects.filter(pk=job_id))
    return marked


def upload_files_remove(*, jobs: Iterable[IngestionJob]) -> None:
    """Remove the stored files of ``jobs``' uploads once the current transaction commits (at once
    outside one).

    Each upload's folder (``KB_DATA_DIR/uploads/<tenant>/<random>/``) goes with its file; a job
    that queued a path (``manage.py ingest --async``) names the user's own file, which is never
    touched, and so is any path outside the upload folder. ``jobs`` is read now (call this before
    deleting them); a folder already gone is no error.
    """
    root = (Path(settings.KB_DATA_DIR) / "uploads").resolve()
    folders = []
    for job in jobs:
        if (job.options or {}).get("reader") == "path" or not job.stored_path:
            continue
        folder = Path(job.stored_path).parent.resolve()
        if folder.parent.parent == root:  # uploads/<tenant>/<random>/: never anything above
            folders.append(folder)
    if folders:
        transaction.on_commit(partial(_folders_remove, folders))


def _folders_remove(folders: list[Path]) -> None:
    # The tenant's folder stays: removing it could race with an upload creating its own folder in it.
    for folder in folders:
        shutil.rmtree(folder, ignore_errors=True)


def ingestion_jobs_recover(*, limit: int = 500) -> list[int]:
    """Re-queue running jobs whose lease ran out (their worker died). Returns their ids.

    Each is claimed back to ``pending`` with a conditional UPDATE (so two recoveries, or a
    recovery and a redelivered task, never queue one job twice) and queued once committed (on
    ``KB_OCR_QUEUE`` if it was found to need OCR).
    """
    now = timezone.now()
    stale = IngestionJob.objects.filter(status=IngestionJob.Status.RUNNING, lease_expires_at__lt=now)
    requeued = []
    for job_id, options in stale.order_by("lease_expires_at").values_list("pk", "options")[:limit]:
        with transaction.atomic():
            if stale.filter(pk=job_id).update(status=IngestionJob.Status.PENDING, worker_id="", lease_expires_at=None):
                requeued.append(job_id)
                transaction.on_commit(partial(_job_enqueue, job_id, queue=_job_queue(options)))
    if requeued:
        logger.warning("Re-queued ingestion jobs whose worker stopped: %s", requeued)
    return requeued
