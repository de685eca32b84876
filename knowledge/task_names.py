"""Registered names of the knowledge app's Celery tasks (``knowledge.tasks`` registers under them).

Services queue these tasks by name with ``core.queue.task_enqueue``, so a service never imports
the tasks module that imports it. The names are the tasks' import paths, as Celery would name
them, so queued messages, routes and the beat schedule keep working.
"""

INGESTION_JOB = "knowledge.tasks.ingestion_job_task"
INGESTION_JOBS_RECOVER = "knowledge.tasks.ingestion_jobs_recover_task"
NEAR_DUPLICATES = "knowledge.tasks.near_duplicates_task"
ENRICHMENT = "knowledge.tasks.enrichment_task"
SUMMARIES = "knowledge.tasks.summaries_task"
SOURCE_SYNC = "knowledge.tasks.source_sync_task"
SOURCES_SYNC_DUE = "knowledge.tasks.sources_sync_due_task"
TABLES_MAINTAIN = "knowledge.tasks.tables_maintain_task"
CHUNKS_EMBED = "knowledge.tasks.chunks_embed_task"
