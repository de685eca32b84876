"""Table upkeep after ingestion: the tables an ingestion grew are vacuumed and analyzed once it commits."""

import pytest
from django.core.cache import cache
from django.db import connection

from config.celery import app
from core.queue import task_get
from knowledge import task_names
from knowledge.services import documents_ingest
from knowledge.services.maintenance import tables_maintain_enqueue
from tests.conftest import BIKE, PASTA


def vacuum_count(table: str) -> int:
    with connection.cursor() as cursor:
        cursor.execute("SELECT vacuum_count FROM pg_stat_user_tables WHERE relname = %s", [table])
        return cursor.fetchone()[0]


@pytest.mark.django_db(transaction=True)
def test_an_ingestion_vacuums_the_tables_it_grew_once_it_commits(tenant, source):
    cache.clear()
    before = vacuum_count("knowledge_chunk")

    documents_ingest(tenant=tenant, source=source, documents=[PASTA, BIKE])

    connection.ensure_connection()
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_stat_clear_snapshot()")
    assert vacuum_count("knowledge_chunk") > before


def test_ingestions_while_an_upkeep_is_queued_queue_no_other(db, monkeypatch, django_capture_on_commit_callbacks):
    cache.clear()
    queued = []
    task = task_get(task_names.TABLES_MAINTAIN)
    monkeypatch.setattr(task, "apply_async", lambda **kwargs: queued.append(kwargs))
    monkeypatch.setitem(app.conf, "task_always_eager", False)

    with django_capture_on_commit_callbacks(execute=True):
        tables_maintain_enqueue()
        tables_maintain_enqueue()
    with django_capture_on_commit_callbacks(execute=True):
        tables_maintain_enqueue()

    assert queued == [{"countdown": 30}]
    cache.clear()
