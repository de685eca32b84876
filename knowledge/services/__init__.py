"""Writes to the knowledge base (services); reads live in ``knowledge.selectors``.

``tenants``: tenants, memberships, sources. ``ingestion``: idempotent, versioned ingestion with
exact-duplicate detection. ``uploads``: API uploads as ingestion jobs. ``deletion``: documents.
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
from knowledge.services.tenants import membership_create, source_get_or_create, tenant_create
from knowledge.services.uploads import ingestion_job_run, upload_ingest

__all__ = [
    "IngestOutcome",
    "IngestReport",
    "collect_files",
    "content_hash",
    "document_delete",
    "documents_ingest",
    "embedding_input",
    "ingestion_job_run",
    "membership_create",
    "paths_ingest",
    "source_get_or_create",
    "tenant_create",
    "upload_ingest",
    "version_reindex",
]
