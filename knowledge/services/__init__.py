"""Writes to the knowledge base (services); reads live in ``knowledge.selectors``.

``tenants``: sources, and deleting a tenant (creating tenants and memberships is
``core.services``). ``ingestion``: idempotent, versioned ingestion with exact-duplicate detection.
``uploads``: ingestion jobs (API uploads, queued files) under leases. ``deletion``: documents.
"""

from knowledge.services.deletion import document_delete
from knowledge.services.ingestion import (
    IngestOutcome,
    IngestReport,
    collect_files,
    content_hash,
    documents_ingest,
    embedding_input,
    paths_ingest,
    version_reindex,
)
from knowledge.services.tenants import source_get_or_create
from knowledge.services.uploads import (
    TRANSIENT_ERRORS,
    IngestionJobBusy,
    ingestion_job_fail,
    ingestion_job_run,
    ingestion_jobs_recover,
    paths_enqueue,
    upload_ingest,
    worker_id_default,
)

__all__ = [
    "TRANSIENT_ERRORS",
    "IngestOutcome",
    "IngestionJobBusy",
    "IngestReport",
    "collect_files",
    "content_hash",
    "document_delete",
    "documents_ingest",
    "embedding_input",
    "ingestion_job_fail",
    "ingestion_job_run",
    "ingestion_jobs_recover",
    "paths_enqueue",
    "paths_ingest",
    "source_get_or_create",
    "upload_ingest",
    "version_reindex",
    "worker_id_default",
]
