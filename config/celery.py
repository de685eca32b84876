"""The Celery app. Without a broker (``CELERY_BROKER_URL``/``REDIS_URL`` unset) tasks run eagerly.

With ``KB_EMBED_QUEUE`` set, the embedding task goes to that queue: start GPU workers with
``-Q <that queue>`` and ``KB_EMBED_DEVICE=cuda``, the others on the default queue (docs/scale.md).

Periodic tasks run under Celery beat: ``.venv/bin/celery -A config beat -l info`` (next to a
worker, ``.venv/bin/celery -A config worker -l info``): trace retention, and the recovery of
ingestion jobs and steered walks whose worker died (their lease ran out), every ``KB_JOB_LEASE_S``
seconds.

Each process that runs tasks sets OpenTelemetry up once (``core.telemetry``; its tasks become
spans when ``OTEL_EXPORTER_OTLP_ENDPOINT`` is set): a prefork pool's child in
``worker_process_init``, a solo or threads worker in ``worker_init``. With
``PROMETHEUS_MULTIPROC_DIR`` set, a child that ends is marked dead for prometheus_client's
multiprocess mode (docs/telemetry.md).
"""

import os

from celery import Celery
from celery.schedules import crontab
from celery.signals import worker_init, worker_process_init, worker_process_shutdown
from django.conf import settings

from core.rls import rls_celery_connect
from core.telemetry import telemetry_setup, telemetry_shutdown
from knowledge.task_names import CHUNKS_EMBED

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")

app = Celery("knowledge_base")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()

# Embedding on a queue of its own when KB_EMBED_QUEUE names one (GPU workers: -Q <queue>); the
# other tasks stay on the default queue ("celery"), where CPU workers parse, split and write.
if settings.KB_EMBED_QUEUE:
    app.conf.task_routes = {CHUNKS_EMBED: {"queue": settings.KB_EMBED_QUEUE}}

# Tasks start as the tables' owner (core.rls) and bind the tenant of the object they work on.
rls_celery_connect()


@worker_init.connect
def _telemetry_worker(sender=None, **kwargs) -> None:
    """A solo or threads worker runs tasks itself: set telemetry up here. A prefork worker's
    children do it after the fork (``_telemetry_child``), never the parent that forks them."""
    pool = getattr(sender, "pool_cls", None)
    if "prefork" not in f"{getattr(pool, '__module__', '')} {pool}":
        telemetry_setup(celery=True)


@worker_process_init.connect
def _telemetry_child(**kwargs) -> None:
    """Each prefork child instruments its tasks after the fork (the SDK's export thread is its own)."""
    telemetry_setup(celery=True)


@worker_process_shutdown.connect
def _telemetry_child_end(pid=None, **kwargs) -> None:
    """Export the child's last spans; its live Prometheus values end with it."""
    telemetry_shutdown()
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        from prometheus_client import multiprocess

        multiprocess.mark_process_dead(pid or os.getpid())


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
    # Launch again the steered walks whose process stopped (their lease ran out), once per lease.
    "walks-recover": {
        "task": "retrieval.tasks.walks_recover_task",
        "schedule": float(settings.KB_JOB_LEASE_S),
    },
    # Start the syncs of sources whose schedule (sync_every) is due; re-queue runs whose worker died.
    "sources-sync-due": {
        "task": "knowledge.tasks.sources_sync_due_task",
        "schedule": 60.0,
    },
}
