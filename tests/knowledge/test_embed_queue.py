"""Embedding on a queue of its own (KB_EMBED_QUEUE): chunks are written first and embedded by a task
of their own, on another worker; BM25 finds them meanwhile, dense search once they are embedded."""

import re
import time

import pytest
import redis

from knowledge import task_names
from knowledge.embedders import get_embedder
from knowledge.models import Chunk, IngestionJob
from knowledge.services import documents_ingest, embedding_input, upload_ingest
from knowledge.services.embeddings import chunks_embed
from retrieval.request import AnswerRequest
from retrieval.search import chunk_search
from tests.conftest import BIKE, PASTA, TAXES
from tests.knowledge.test_jobs import BROKER, Worker, _bulk_jsonl, job_queue  # noqa: F401, F811


def _pending(tenant) -> int:
    return Chunk.objects.for_tenant(tenant).filter(embedding__isnull=True).count()


def test_without_an_embed_queue_ingestion_embeds_inline_as_before(
    tenant, source, settings, django_capture_on_commit_callbacks
):
    settings.KB_EMBED_QUEUE = ""
    with django_capture_on_commit_callbacks() as queued:
        documents_ingest(tenant=tenant, source=source, documents=[PASTA, BIKE])
    assert _pending(tenant) == 0 and Chunk.objects.for_tenant(tenant).count() > 0
    assert not any(getattr(c, "args", ())[:1] == (task_names.CHUNKS_EMBED,) for c in queued)
    assert chunk_search(AnswerRequest(question="how long to cook spaghetti", k=1, mode="dense"), tenant=tenant).results


def test_with_an_embed_queue_chunks_are_found_by_bm25_at_once_and_by_dense_search_once_embedded(
    tenant, source, settings, django_capture_on_commit_callbacks
):
    settings.KB_EMBED_QUEUE = "embed"
    with django_capture_on_commit_callbacks() as queued:
        report = documents_ingest(tenant=tenant, source=source, documents=[PASTA, BIKE, TAXES])
    chunks = report.counts()["chunks"]
    assert chunks > 0 and report.embed_seconds == 0
    assert _pending(tenant) == chunks  # written, not embedded yet

    lexical = chunk_search(AnswerRequest(question="spaghetti al dente", k=3, mode="lexical"), tenant=tenant).results
    assert lexical and lexical[0].chunk.version.document.external_id == "recipes/pasta"
    assert (
        chunk_search(AnswerRequest(question="how long to cook spaghetti", k=3, mode="dense"), tenant=tenant).results
        == []
    )
    hybrid = chunk_search(AnswerRequest(question="spaghetti al dente", k=3), tenant=tenant).results
    assert hybrid[0].chunk.version.document.external_id == "recipes/pasta"

    for callback in queued:  # what a broker-less commit runs: the embedding task among them
        callback()
    assert _pending(tenant) == 0
    dense = chunk_search(
        AnswerRequest(question="how long should I boil noodles", k=1, mode="dense"), tenant=tenant
    ).results
    assert dense[0].chunk.version.document.external_id == "recipes/pasta"


def test_deferred_embeddings_equal_the_inline_ones(tenant, source, settings, django_capture_on_commit_callbacks):
    settings.KB_EMBED_QUEUE = "embed"
    with django_capture_on_commit_callbacks(execute=True):
        documents_ingest(tenant=tenant, source=source, documents=[PASTA, BIKE])
    deferred = dict(Chunk.objects.for_tenant(tenant).values_list("text", "embedding"))
    assert deferred and all(vector is not None for vector in deferred.values())
    for chunk in Chunk.objects.for_tenant(tenant):
        inline = get_embedder(tenant.embedder).embed([embedding_input(chunk)])[0]
        assert float((inline * deferred[chunk.text]).sum()) > 0.99999


def test_the_embedding_task_fills_every_waiting_chunk_in_rounds_and_then_has_nothing_to_do(
    tenant, source, settings, django_capture_on_commit_callbacks
):
    settings.KB_EMBED_QUEUE = "embed"
    with django_capture_on_commit_callbacks():  # the task is not run at commit
        report = documents_ingest(tenant=tenant, source=source, documents=[PASTA, BIKE, TAXES])
    result = chunks_embed(tenant_id=tenant.pk, round_size=2)
    assert result["embedded"] == report.counts()["chunks"] and result["rounds"] >= 2 and not result["busy"]
    assert _pending(tenant) == 0
    assert chunks_embed(tenant_id=tenant.pk)["embedded"] == 0


def _tasks_run(log_text: str) -> set[str]:
    """The task names a worker's log says it ran (``Task <name>[<id>] succeeded``)."""
    return set(re.findall(r"Task (\S+)\[[0-9a-f-]+\] succeeded", log_text)) if log_text else set()


@pytest.mark.django_db(transaction=True)
def test_two_real_workers_split_the_work_parsing_and_writing_on_one_queue_embedding_on_the_other(
    tenant,
    job_queue,  # noqa: F811
    tmp_path,
    settings,
):
    settings.KB_DATA_DIR = tmp_path
    embed_queue = f"{job_queue}-embed"
    env = {"KB_EMBED_QUEUE": embed_queue, "KB_NEAR_DUPLICATES": "false"}
    logs = {name: tmp_path / f"{name}.log" for name in ("cpu", "gpu")}
    job = upload_ingest(
        tenant=tenant, source_name="bulk", file_name="bulk.jsonl", data=_bulk_jsonl(6, seed=3), options={}
    )
    workers = [Worker(job_queue, "cpu", logs["cpu"], env=env), Worker(embed_queue, "gpu", logs["gpu"], env=env)]
    try:
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:
            job.refresh_from_db()
            if job.status in ("done", "failed") and Chunk.objects.for_tenant(tenant).exists() and not _pending(tenant):
                break
            time.sleep(0.2)
    finally:
        for worker in workers:
            worker.stop()
        redis.Redis.from_url(BROKER).delete(embed_queue)
    text = {name: log.read_text() if log.exists() else "" for name, log in logs.items()}
    assert job.status == "done", (job.error, text["cpu"][-3000:])
    assert job.worker_id.startswith("cpu@")  # parsed, split and written by the CPU worker
    assert Chunk.objects.for_tenant(tenant).count() == job.result["chunks"] > 0
    assert _pending(tenant) == 0, text["gpu"][-3000:]
    assert task_names.CHUNKS_EMBED in _tasks_run(text["gpu"])
    assert task_names.INGESTION_JOB not in _tasks_run(text["gpu"])
    assert _tasks_run(text["cpu"]) == {task_names.INGESTION_JOB}
    assert IngestionJob.objects.get(pk=job.pk).result["embed_seconds"] == 0
    top = chunk_search(AnswerRequest(question="Bulk document 2", k=5, mode="dense"), tenant=tenant).results
    assert top
