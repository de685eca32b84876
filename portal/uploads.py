"""The Sources page's uploads: files into an upload source, one ingestion job each, and the list of
those jobs (``?jobs=<ids>``) while they run."""

from __future__ import annotations

import re

from django.contrib import messages
from django.urls import reverse

from core.errors import ApplicationError
from core.uploads import upload_refusal
from knowledge.models import IngestionJob
from knowledge.selectors import ingestion_job_list
from knowledge.services.upload_batches import upload_batch_ingest
from portal.forms import UploadForm

# ``?jobs=1,2``: the ingestion jobs of one upload (at most this many ids are read).
JOB_IDS = re.compile(r"[1-9][0-9]{0,17}")
MAX_JOBS_SHOWN = 50


def files_upload(request, tenant, form: UploadForm) -> list[int]:
    """Upload the request's files as ``form`` says; the ids of the jobs made. Each refused file
    becomes an error message (``django.contrib.messages``, shown after the redirect); a refusal
    of the whole submission is the form's error. A submission over the upload limits was stopped
    while it streamed in (``core.uploads``): its later files and fields were never read, so none
    of it is uploaded and the form says why."""
    refusal = upload_refusal(request)
    if refusal is not None:
        form.add_error(None, f"{refusal.message} Nothing was uploaded.")
        return []
    if not form.is_valid():
        return []
    try:
        outcomes = upload_batch_ingest(
            tenant=tenant, user=request.user, source_name=form.source_name(), files=request.FILES.getlist("files")
        )
    except ApplicationError as exc:
        form.add_error(None, exc.message)
        return []
    for outcome in outcomes:
        if outcome.error:
            messages.error(request, outcome.error)
    job_ids = [outcome.job.pk for outcome in outcomes if outcome.job is not None]
    if not job_ids:
        form.add_error(None, "None of the files was uploaded.")
    return job_ids


def job_ids_parse(value: str) -> list[int]:
    """The ids in ``?jobs=1,2`` (anything that is not an id is skipped), at most ``MAX_JOBS_SHOWN``."""
    ids = [int(part) for part in value.split(",")[:MAX_JOBS_SHOWN] if JOB_IDS.fullmatch(part.strip())]
    return list(dict.fromkeys(ids))


def jobs_url(name: str, job_ids: list[int]) -> str:
    """The URL named ``name`` listing ``job_ids`` (``?jobs=1,2``)."""
    return f"{reverse(name)}?jobs={','.join(str(i) for i in job_ids)}"


def jobs_context(tenant, user, job_ids: list[int]) -> dict:
    """What ``portal/_upload_jobs.html`` renders: the tenant's jobs among ``job_ids`` (others are
    left out), each with a one-line ``summary``, and whether any is still waiting or running."""
    jobs = ingestion_job_list(tenant=tenant, job_ids=job_ids, user=user)
    unfinished = (IngestionJob.Status.PENDING, IngestionJob.Status.RUNNING)
    shown = [job.pk for job in jobs]
    return {
        "jobs": [{"job": job, "summary": job_summary(job)} for job in jobs],
        "jobs_polling": any(job.status in unfinished for job in jobs),
        "jobs_page_url": jobs_url("portal:sources", shown) if shown else "",
        "jobs_fragment_url": jobs_url("portal:upload-jobs", shown) if shown else "",
    }


def job_summary(job: IngestionJob) -> str:
    """What became of the job: its counts when done, its error when failed, else where it is."""
    if job.status == IngestionJob.Status.DONE:
        result = job.result or {}
        counts = [
            f"{result[key]} {label}"
            for key, label in (
                ("created", "new"),
                ("updated", "updated"),
                ("unchanged", "unchanged"),
                ("duplicate", "duplicate"),
            )
            if result.get(key)
        ]
        documents = sum(result.get(key, 0) for key in ("created", "updated", "unchanged", "duplicate"))
        noun = "document" if documents == 1 else "documents"
        chunks = result.get("chunks", 0)
        return f"{documents} {noun} ({', '.join(counts) or 'none'}), {chunks} chunk{'' if chunks == 1 else 's'} stored"
    if job.status == IngestionJob.Status.FAILED:
        return job.error
    if job.status == IngestionJob.Status.RUNNING:
        stage = (job.progress or {}).get("stage")
        return f"Working: {stage}" if stage else "Working"
    return job.error or "Waiting for a worker"
