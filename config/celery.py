"""The Celery app. Without a broker (``CELERY_BROKER_URL``/``REDIS_URL`` unset) tasks run eagerly.

Periodic tasks run under Celery beat: ``.venv/bin/celery -A config beat -l info`` (next to a
worker, ``.venv/bin/celery -A config worker -l info``): trace retention, and the recovery of
ingestion jobs whose worker died (their lease ran out), every ``KB_JOB_LEASE_S`` seconds.
"""

import os

from celery import Celery
from celery.schedules import crontab
from django.conf import settings

from core.rls import rls_celery_connect

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")

app = Celery("knowledge_base")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()

# Tasks start as the tables' owner (core.rls) and bind the tenant of the object they work on.
rls_celery_connect()

app.conf.beat_schedule = {
    # Delete answer traces older than KB_TRACE_RETENTION_DAYS, once a day at a quiet hour.
    "traces-prune-daily": {
        "task": "retrieval.tasks.traces_prune_task",
        "schedule": crontab(hour=3, minute=17),
    },
    # Re-queue ingestion jobs whose lease ran out (their worker was killed), once per lease.
    "ingestion-jobs-recover": {
        "task": "knowledge.tasks.ingestion_jobs_recover_task",
        "schedule": float(settings.KB_JOB_LEASE_S),
    },
    # Start the syncs of sources whose schedule (sync_every) is due; re-queue runs whose worker died.
    "sources-sync-due": {
        "task": "knowledge.tasks.sources_sync_due_task",
        "schedule": 60.0,
    },
}
