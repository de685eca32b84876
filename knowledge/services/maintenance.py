"""Table upkeep after ingestion: ``VACUUM (ANALYZE)`` of the tables an ingestion grew, in the background.

Rows a bulk load just wrote are slow to read until a vacuum has set their hint bits and marked
their pages all-visible: the first searches after an ingestion fetched their chunks several times
slower than the same searches minutes later, once autovacuum had passed. So each ingestion queues
``tables_maintain`` when it commits. Queuing is batched: while one upkeep is queued (at most
``KB_MAINTAIN_DELAY_S`` seconds, the countdown it waits so that a stream of small ingestions
shares it), further ingestions queue nothing. ``VACUUM`` only visits the pages that are not
all-visible yet, so the upkeep costs in proportion to what the ingestions wrote.
"""

from __future__ import annotations

import logging
import time

from celery import current_app
from django.conf import settings
from django.core.cache import cache
from django.db import connection, transaction

from core.queue import task_get
from knowledge import task_names

logger = logging.getLogger(__name__)

# Tables an ingestion grows; their order is the order they are vacuumed in.
GROWN_TABLES = (
    "knowledge_chunk",
    "knowledge_posting",
    "knowledge_termstatistic",
    "knowledge_documentversion",
    "knowledge_document",
)
_QUEUED = "knowledge:tables-maintain-queued"


def tables_maintain_enqueue() -> None:
    """Queue the upkeep once the current transaction commits, unless one is already queued."""
    transaction.on_commit(_enqueue, robust=True)


def _enqueue() -> None:
    """Queue (or, without a broker, run) the upkeep; a failure is logged, never the ingestion's."""
    delay = settings.KB_MAINTAIN_DELAY_S
    try:
        if not cache.add(_QUEUED, True, timeout=delay + 60):
            return
        task = task_get(task_names.TABLES_MAINTAIN)
        if current_app.conf.task_always_eager:
            task.apply()  # no broker: at once, in this process
        else:
            task.apply_async(countdown=delay)
    except Exception:
        cache.delete(_QUEUED)
        logger.exception("Could not queue the table upkeep after an ingestion")


def tables_maintain() -> dict:
    """``VACUUM (ANALYZE)`` each of ``GROWN_TABLES``; returns ``{table: seconds}``.

    Runs outside any transaction (``VACUUM`` cannot run inside one); inside one it does nothing
    and says so in the log. Ingestions committed from now on queue the next upkeep.
    """
    cache.delete(_QUEUED)
    if connection.in_atomic_block:
        logger.info("Table upkeep skipped: it cannot run inside a transaction.")
        return {}
    seconds = {}
    with connection.cursor() as cursor:
        for table in GROWN_TABLES:
            started = time.perf_counter()
            cursor.execute(f"VACUUM (ANALYZE) {table}")
            seconds[table] = round(time.perf_counter() - started, 3)
    return seconds
