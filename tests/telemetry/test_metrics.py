"""``/metrics``: Prometheus's text format for the operator only, fed by requests, answers, the LLM,
ingestion, syncs and the Celery queues."""

import os
import socket
import subprocess
import sys
import time
import urllib.request
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import redis
from prometheus_client.parser import text_string_to_metric_families
from rest_framework.test import APIClient

from core.metrics import queue_lengths
from knowledge.services import upload_ingest
from knowledge.services.sources import source_create
from knowledge.services.sync import source_sync
from llm import LLMClient, LLMHTTPError
from tests.api.conftest import client_for
from tests.conftest import free_port, redis_url
from tests.factories import folder_granted
from tests.telemetry.conftest import QUESTION
from tests.telemetry.test_spans import _database_url

ROOT = Path(__file__).resolve().parents[2]
BROKER = redis_url(12)  # this module's own database (test_spans uses 13)
TOKEN = "scrape-token-0123456789abcdef"


def samples(text: str) -> dict[tuple[str, frozenset], float]:
    """``{(sample name, labels): value}`` of a Prometheus text exposition."""
    return {
        (sample.name, frozenset(sample.labels.items())): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def value(scraped: dict, name: str, **labels) -> float:
    return scraped.get((name, frozenset(labels.items())), 0.0)


@pytest.fixture
def operator(django_user_model):
    return django_user_model.objects.create_superuser("operator", "operator@example.org", "operator-pass-123")


def scrape(client) -> dict:
    response = client.get("/metrics")
    assert response.status_code == 200, response.status_code
    assert response["Content-Type"].startswith("text/plain; version=")
    return samples(response.content.decode())


@pytest.fixture
def operator_client(client, operator):
    client.force_login(operator)
    return client


def test_metrics_are_refused_to_everyone_but_the_operator(client, member, django_user_model, settings):
    settings.KB_METRICS_TOKEN = TOKEN
    assert client.get("/metrics").status_code == 404  # anonymous
    client.force_login(member)
    assert client.get("/metrics").status_code == 404  # a tenant's member
    staff = django_user_model.objects.create_user("staff", password="staff-pass-123", is_staff=True)
    client.force_login(staff)
    assert client.get("/metrics").status_code == 404  # staff is not the operator
    assert client_for(member).get("/metrics").status_code == 404  # an API token
    anonymous = APIClient()
    assert anonymous.get("/metrics", HTTP_AUTHORIZATION=f"Bearer {TOKEN}x").status_code == 404
    assert anonymous.get("/metrics", HTTP_AUTHORIZATION=f"Token {TOKEN}").status_code == 404


def test_without_a_token_setting_no_bearer_token_opens_the_metrics(client, settings):
    settings.KB_METRICS_TOKEN = ""
    assert client.get("/metrics", HTTP_AUTHORIZATION="Bearer ").status_code == 404


def test_a_scraper_with_the_bearer_token_reads_the_request_latencies(client, settings):
    settings.KB_METRICS_TOKEN = TOKEN
    client.get("/api/v1/documents/")  # refused (401), timed all the same
    response = client.get("/metrics", HTTP_AUTHORIZATION=f"Bearer {TOKEN}")
    assert response.status_code == 200
    scraped = samples(response.content.decode())
    route = {"method": "GET", "route": "api/v1/documents/", "status": "401"}
    assert value(scraped, "kb_http_request_duration_seconds_count", **route) >= 1
    client.get("/no/such/page/")
    scraped = samples(client.get("/metrics", HTTP_AUTHORIZATION=f"Bearer {TOKEN}").content.decode())
    assert value(scraped, "kb_http_request_duration_seconds_count", method="GET", route="unmatched", status="404") >= 1
    assert not any("no/such" in str(labels) for _, labels in scraped)


def test_an_answer_feeds_the_pipeline_stage_and_llm_metrics(corpus, member, operator_client, llm_endpoint):
    before = scrape(operator_client)
    response = client_for(member).post("/api/v1/ask/", {"question": QUESTION}, format="json")
    assert response.status_code == 200
    after = scrape(operator_client)

    def grew(name, **labels):
        return value(after, name, **labels) - value(before, name, **labels)

    assert grew("kb_pipeline_run_duration_seconds_count", operation="answer", pipeline="simple", outcome="ok") == 1
    for stage in ("scope", "retrieve", "fuse", "pack", "generate"):
        assert grew("kb_pipeline_stage_duration_seconds_count", pipeline="simple", stage=stage) == 1, stage
    assert grew("kb_llm_request_duration_seconds_count", model="scripted-model", operation="chat", outcome="ok") == 1
    assert grew("kb_llm_tokens_total", model="scripted-model", type="input") == 12
    assert grew("kb_llm_tokens_total", model="scripted-model", type="output") == 4
    assert grew("kb_http_request_duration_seconds_count", method="POST", route="api/v1/ask/", status="200") == 1


def test_llm_errors_and_the_time_to_the_first_token_are_counted(operator_client, llm_endpoint):
    client = LLMClient("scripted-model", base_url=f"{llm_endpoint.url}/v1", api_key="test", retries=0)
    before = scrape(operator_client)
    assert "".join(client.stream([{"role": "user", "content": "hello"}])) == llm_endpoint.reply
    llm_endpoint.fail_status = 503
    with pytest.raises(LLMHTTPError):
        client.chat([{"role": "user", "content": "hello"}])
    after = scrape(operator_client)
    labels = {"model": "scripted-model", "operation": "chat", "error": "http_error"}
    assert value(after, "kb_llm_errors_total", **labels) - value(before, "kb_llm_errors_total", **labels) == 1
    first = "kb_llm_time_to_first_token_seconds_count"
    assert value(after, first, model="scripted-model") - value(before, first, model="scripted-model") == 1


def test_ingestion_jobs_and_syncs_feed_their_throughput_and_failures(
    tenant, source, operator_client, tmp_path, settings, django_capture_on_commit_callbacks
):
    settings.KB_DATA_DIR = tmp_path / "data"
    before = scrape(operator_client)
    with django_capture_on_commit_callbacks(execute=True):  # no broker: each job runs as it is queued
        tea = b"# Tea\n\nBrew it for two minutes."
        upload_ingest(tenant=tenant, source_name="handbook", file_name="a.md", data=tea, options={})
    settings.KB_JOB_MAX_ATTEMPTS = 0  # the next job counts as started too often: it fails
    with django_capture_on_commit_callbacks(execute=True):
        eggs = b"# Eggs\n\nBoil them."
        upload_ingest(tenant=tenant, source_name="handbook", file_name="b.md", data=eggs, options={})
    folder = folder_granted(tenant, tmp_path / "docs")
    (folder / "eggs.md").write_text("# Eggs\n\nBoil the eggs for seven minutes.")
    (folder / "bread.md").write_text("# Bread\n\nKnead the dough for ten minutes.")
    source_sync(source=source_create(tenant=tenant, name="kitchen", kind="folder", location=str(folder)))
    after = scrape(operator_client)

    def grew(name, **labels):
        return value(after, name, **labels) - value(before, name, **labels)

    assert grew("kb_ingestion_jobs_total", status="done") == 1
    assert grew("kb_ingestion_jobs_total", status="failed") == 1
    assert grew("kb_ingested_documents_total", outcome="created") == 3  # one uploaded, two synced
    assert grew("kb_ingested_chunks_total") >= 3
    assert grew("kb_ingestion_duration_seconds_count") == 2  # the upload, and the sync's one batch
    assert grew("kb_sync_runs_total", kind="folder", status="done") == 1
    assert grew("kb_sync_documents_total", kind="folder", outcome="new") == 2
    assert grew("kb_sync_run_duration_seconds_count", kind="folder") == 1


@pytest.fixture
def broker_queue(settings):
    """A queue of its own on the real local Redis, with the Celery app pointed at it."""
    from config.celery import app
    from tests.telemetry.test_spans import _forget_connections

    client = redis.Redis.from_url(BROKER)
    try:
        client.ping()
    except redis.ConnectionError as exc:
        pytest.fail(f"Redis is not running on 127.0.0.1:6379 ({exc}).")
    queue = f"kb-test-metrics-{uuid.uuid4().hex[:12]}"
    task = "retrieval.tasks.traces_prune_task"
    previous = {key: app.conf[key] for key in ("broker_url", "task_always_eager", "task_routes")}
    settings.CELERY_BROKER_URL = BROKER
    app.conf.update(broker_url=BROKER, task_always_eager=False, task_routes={task: {"queue": queue}})
    _forget_connections(app)
    try:
        yield queue
    finally:
        app.conf.update(previous)
        _forget_connections(app)
        client.delete(queue)


def test_the_celery_queue_lengths_are_read_from_the_broker_when_scraped(operator_client, broker_queue):
    from core.queue import task_get

    assert queue_lengths()[broker_queue] == 0
    for _ in range(3):
        task_get("retrieval.tasks.traces_prune_task").delay()  # no worker reads this queue
    scraped = scrape(operator_client)
    assert value(scraped, "kb_celery_queue_length", queue=broker_queue) == 3
    assert value(scraped, "kb_celery_broker_up") == 1


def test_without_a_broker_no_queue_is_reported(operator_client):
    scraped = scrape(operator_client)
    assert not [name for name, _ in scraped if name.startswith("kb_celery_")]


def _wait_for_port(port: int, process: subprocess.Popen, log: Path, timeout_s: float = 120) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise AssertionError(log.read_text()[-3000:])
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.2)
    raise AssertionError(log.read_text()[-3000:])


@pytest.mark.django_db(transaction=True)
def test_gunicorn_workers_add_up_their_metrics_through_the_multiprocess_directory(tmp_path):
    port = free_port()
    env = {k: v for k, v in os.environ.items() if k not in ("PROMETHEUS_MULTIPROC_DIR", "OTEL_EXPORTER_OTLP_ENDPOINT")}
    env.update(
        DATABASE_URL=_database_url(),
        KB_DATA_DIR=str(tmp_path / "data"),
        KB_BIND=f"127.0.0.1:{port}",
        KB_WEB_WORKERS="2",
        KB_METRICS_TOKEN=TOKEN,
        KB_EMBEDDER="openai:unused",  # no embedder to load at start-up: these requests search nothing
        OPENAI_BASE_URL="http://127.0.0.1:9/v1",
    )
    stale = tmp_path / "data" / "metrics" / "gunicorn" / "counter_1.db"
    stale.parent.mkdir(parents=True)
    stale.write_bytes(b"left by an earlier run")
    log = tmp_path / "gunicorn.log"
    command = [sys.executable, "-m", "gunicorn", "-c", "config/gunicorn_conf.py", "config.wsgi:application"]
    with log.open("wb") as out:
        server = subprocess.Popen(command, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT)
    try:
        _wait_for_port(port, server, log)
        assert not stale.exists()  # emptied when gunicorn started

        def get(path: str) -> int:
            request = urllib.request.Request(f"http://127.0.0.1:{port}{path}", headers={"Connection": "close"})
            try:
                with urllib.request.urlopen(request, timeout=30) as response:
                    return response.status
            except urllib.error.HTTPError as error:
                return error.code

        with ThreadPoolExecutor(8) as pool:
            statuses = list(pool.map(get, ["/api/v1/documents/"] * 40))
        assert set(statuses) == {401}
        request = urllib.request.Request(
            f"http://127.0.0.1:{port}/metrics", headers={"Authorization": f"Bearer {TOKEN}"}
        )
        with urllib.request.urlopen(request, timeout=30) as response:
            scraped = samples(response.read().decode())
        route = {"method": "GET", "route": "api/v1/documents/", "status": "401"}
        assert value(scraped, "kb_http_request_duration_seconds_count", **route) == 40  # both workers' counts
        files = list((tmp_path / "data" / "metrics" / "gunicorn").glob("histogram_*.db"))
        assert files, "the workers wrote no multiprocess files"
    finally:
        server.terminate()
        server.wait(60)
