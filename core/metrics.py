"""Prometheus metrics: their definitions, the request middleware and the operator's ``/metrics``.

Every metric is named ``kb_...`` and labelled only by values from a small, fixed set (no tenant,
user or question), so the series stay few however many tenants there are (docs/telemetry.md):

======================================  ==============================  ==========================
metric                                  labels                          what
======================================  ==============================  ==========================
kb_http_request_duration_seconds        method, route, status           Django requests (to the
                                                                        response; a stream's body
                                                                        is not counted)
kb_pipeline_run_duration_seconds        operation, pipeline, outcome    answer and retrieve runs
kb_pipeline_stage_duration_seconds      pipeline, stage                 every stage's step
kb_llm_request_duration_seconds         model, operation, outcome       LLM calls (retries in)
kb_llm_tokens_total                     model, type                     input and output tokens
kb_llm_errors_total                     model, operation, error         failed LLM calls
kb_llm_time_to_first_token_seconds      model                           streamed LLM calls
kb_llm_cost_usd_total                   model                           priced LLM calls
kb_ingested_documents_total             outcome                         documents stored
kb_ingested_chunks_total                (none)                          chunks embedded, stored
kb_ingestion_duration_seconds           (none)                          ``documents_ingest`` calls
kb_ingestion_jobs_total                 status                          finished or retried jobs
kb_sync_runs_total                      kind, status                    finished or retried runs
kb_sync_documents_total                 kind, outcome                   what sync runs found
kb_sync_run_duration_seconds            kind                            sync runs
kb_celery_queue_length                  queue                           messages waiting (scrape)
kb_celery_broker_up                     (none)                          broker reached (scrape)
======================================  ==============================  ==========================

Several processes (gunicorn workers, Celery workers on the same machine) share their values
through prometheus_client's multiprocess mode: set ``PROMETHEUS_MULTIPROC_DIR`` to a directory
they all write, emptied before they start (``config/gunicorn_conf.py`` sets one up for gunicorn
when it is unset); ``/metrics`` then adds up every process's files.
"""

from __future__ import annotations

import hmac
import logging
import os
import time

from prometheus_client import CONTENT_TYPE_LATEST, REGISTRY, CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import GaugeMetricFamily

logger = logging.getLogger(__name__)

if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
    # Multiprocess mode writes a file per process there from the first metric on: it must exist.
    os.makedirs(os.environ["PROMETHEUS_MULTIPROC_DIR"], exist_ok=True)

# Seconds: from a cached search (a few ms) to an answer through a slow local LLM (minutes).
LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300)
STAGE_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120)
METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})

HTTP_REQUEST_SECONDS = Histogram(
    "kb_http_request_duration_seconds",
    "Django request latency to the response, by method, URL route (unmatched for none) and status.",
    ["method", "route", "status"],
    buckets=LATENCY_BUCKETS,
)
PIPELINE_RUN_SECONDS = Histogram(
    "kb_pipeline_run_duration_seconds",
    "Pipeline runs: operation answer or retrieve, the pipeline, outcome ok, degraded or error.",
    ["operation", "pipeline", "outcome"],
    buckets=LATENCY_BUCKETS,
)
PIPELINE_STAGE_SECONDS = Histogram(
    "kb_pipeline_stage_duration_seconds",
    "Wall time of each stage's step in pipeline runs.",
    ["pipeline", "stage"],
    buckets=STAGE_BUCKETS,
)
LLM_REQUEST_SECONDS = Histogram(
    "kb_llm_request_duration_seconds",
    "LLM calls (chat, stream, structured, tool_call), retries included, by outcome ok or error.",
    ["model", "operation", "outcome"],
    buckets=LATENCY_BUCKETS,
)
LLM_TOKENS = Counter("kb_llm_tokens", "LLM tokens, type input or output.", ["model", "type"])
LLM_ERRORS = Counter(
    "kb_llm_errors",
    "Failed LLM calls by error (timeout, unavailable, http_error, ...).",
    ["model", "operation", "error"],
)
LLM_FIRST_TOKEN_SECONDS = Histogram(
    "kb_llm_time_to_first_token_seconds",
    "Time from sending a streamed LLM request to its first piece of text.",
    ["model"],
    buckets=LATENCY_BUCKETS,
)
LLM_COST_USD = Counter("kb_llm_cost_usd", "Cost of LLM calls in US dollars (KB_LLM_PRICES).", ["model"])
INGESTED_DOCUMENTS = Counter(
    "kb_ingested_documents", "Documents ingested, outcome created, updated, unchanged or duplicate.", ["outcome"]
)
INGESTED_CHUNKS = Counter("kb_ingested_chunks", "Chunks embedded and stored by ingestion.")
INGESTION_SECONDS = Histogram(
    "kb_ingestion_duration_seconds",
    "Ingestion calls (one file, one sync batch), embedding included.",
    [],
    buckets=LATENCY_BUCKETS,
)
INGESTION_JOBS = Counter(
    "kb_ingestion_jobs", "Ingestion jobs that ended (done, failed) or went back (retry).", ["status"]
)
SYNC_RUNS = Counter("kb_sync_runs", "Sync runs that ended (done, failed) or went back (retry).", ["kind", "status"])
SYNC_DOCUMENTS = Counter(
    "kb_sync_documents", "What sync runs found: new, updated, unchanged, deleted, failed.", ["kind", "outcome"]
)
SYNC_RUN_SECONDS = Histogram(
    "kb_sync_run_duration_seconds", "Wall time of sync runs.", ["kind"], buckets=LATENCY_BUCKETS
)


# --- Recording --------------------------------------------------------------------------------

# Each metric's child per label values, looked up once: ``labels()`` checks and locks on every
# call, which doubles the cost of an observation on the paths run for every request and answer.
_children: dict[tuple, object] = {}


def _child(metric, *labels: str):
    key = (id(metric), labels)
    child = _children.get(key)
    if child is None:
        child = _children[key] = metric.labels(*labels)
    return child


def pipeline_run_observe(*, operation: str, pipeline: str, outcome: str, seconds: float, stages=()) -> None:
    """Record one pipeline run: ``operation`` (answer, retrieve), ``pipeline`` name, ``outcome``
    (ok, degraded, error), its wall time in seconds, and ``stages`` as ``(stage, seconds)``
    pairs."""
    _child(PIPELINE_RUN_SECONDS, operation, pipeline, outcome).observe(seconds)
    for stage, stage_seconds in stages:
        _child(PIPELINE_STAGE_SECONDS, pipeline, stage).observe(stage_seconds)


def llm_call_observe(
    *,
    model: str,
    operation: str,
    seconds: float,
    tokens_in: int = 0,
    tokens_out: int = 0,
    cost_usd: float = 0.0,
    error: str | None = None,
    first_token_s: float | None = None,
) -> None:
    """Record one LLM call of ``operation`` (chat, stream, structured, tool_call) to ``model``:
    its seconds, tokens and cost in USD, ``error`` (a short kind such as ``timeout``) when it
    failed, and for a stream the seconds to its first piece of text."""
    LLM_REQUEST_SECONDS.labels(model, operation, "error" if error else "ok").observe(seconds)
    if tokens_in:
        LLM_TOKENS.labels(model, "input").inc(tokens_in)
    if tokens_out:
        LLM_TOKENS.labels(model, "output").inc(tokens_out)
    if cost_usd > 0:
        LLM_COST_USD.labels(model).inc(cost_usd)
    if error:
        LLM_ERRORS.labels(model, operation, error).inc()
    if first_token_s is not None:
        LLM_FIRST_TOKEN_SECONDS.labels(model).observe(first_token_s)


def ingestion_observe(*, counts: dict[str, int], seconds: float) -> None:
    """Record one ingestion call: ``counts`` as ``IngestReport.counts()`` gives them (documents
    per outcome, ``chunks``) and its wall time in seconds."""
    for outcome in ("created", "updated", "unchanged", "duplicate"):
        if counts.get(outcome):
            INGESTED_DOCUMENTS.labels(outcome).inc(counts[outcome])
    if counts.get("chunks"):
        INGESTED_CHUNKS.inc(counts["chunks"])
    INGESTION_SECONDS.observe(seconds)


def ingestion_job_observe(*, status: str) -> None:
    """Record an ingestion job that ended (``done``, ``failed``) or went back for a ``retry``."""
    INGESTION_JOBS.labels(status).inc()


def sync_run_observe(*, kind: str, status: str, seconds: float, counts: dict | None = None) -> None:
    """Record a sync run of a ``kind`` source (folder, web, git) that ended (``done``,
    ``failed``) or went back for a ``retry``, its seconds and what it found (``counts``: new,
    updated, unchanged, deleted, failed)."""
    SYNC_RUNS.labels(kind, status).inc()
    SYNC_RUN_SECONDS.labels(kind).observe(seconds)
    for outcome in ("new", "updated", "unchanged", "deleted", "failed"):
        if (counts or {}).get(outcome):
            SYNC_DOCUMENTS.labels(kind, outcome).inc(counts[outcome])


# --- Requests ---------------------------------------------------------------------------------


class RequestMetricsMiddleware:
    """Times every request to its response into ``kb_http_request_duration_seconds``.

    The route is the URL pattern that matched (``api/v1/traces/<int:pk>/``), ``unmatched`` when
    none did, so scanners' paths never become series. Place it first, to time the other
    middleware too.
    """

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        started = time.perf_counter()
        response = self.get_response(request)
        match = getattr(request, "resolver_match", None)
        route = (match.route or match.view_name or "unmatched") if match is not None else "unmatched"
        method = request.method if request.method in METHODS else "other"
        _child(HTTP_REQUEST_SECONDS, method, route, str(response.status_code)).observe(time.perf_counter() - started)
        return response


# --- The queues, read at scrape time --------------------------------------------------------


class QueueCollector:
    """``kb_celery_queue_length`` per queue (the default queue and every routed one) and
    ``kb_celery_broker_up``, read from the broker when scraped; nothing without a broker."""

    def __init__(self, timeout_s: float = 2.0):
        self.timeout_s = timeout_s

    def collect(self):
        from celery import current_app
        from django.conf import settings

        if not settings.CELERY_BROKER_URL or current_app.conf.task_always_eager:
            return
        up = GaugeMetricFamily("kb_celery_broker_up", "1 when the broker answered the last scrape, else 0.")
        lengths = GaugeMetricFamily("kb_celery_queue_length", "Messages waiting in a Celery queue.", labels=["queue"])
        try:
            for queue, length in queue_lengths(timeout_s=self.timeout_s).items():
                lengths.add_metric([queue], length)
            up.add_metric([], 1)
        except Exception as exc:  # noqa: BLE001 - a scrape reports the broker down, never fails
            logger.warning("Could not read the Celery queue lengths: %s", exc)
            up.add_metric([], 0)
        yield up
        yield lengths


def queue_names() -> list[str]:
    """The Celery queues tasks go to: the default one and those named in ``task_routes``."""
    from celery import current_app

    names = {current_app.conf.task_default_queue or "celery"}
    routes = current_app.conf.task_routes or {}
    if isinstance(routes, dict):
        names.update(route["queue"] for route in routes.values() if isinstance(route, dict) and route.get("queue"))
    return sorted(names)


def queue_lengths(*, timeout_s: float = 2.0) -> dict[str, int]:
    """``{queue: messages waiting}`` for ``queue_names()``, asked of the broker (Redis lists, AMQP
    queues); a queue the broker does not know is empty. Broker errors propagate."""
    from celery import current_app
    from kombu.exceptions import ChannelError

    lengths = {}
    with current_app.connection_for_read(connect_timeout=timeout_s) as connection:
        connection.ensure_connection(max_retries=1, timeout=timeout_s)
        channel = connection.default_channel
        for name in queue_names():
            try:
                lengths[name] = channel.queue_declare(queue=name, passive=True).message_count
            except ChannelError:
                lengths[name] = 0
                channel = connection.channel()
    return lengths


# --- The operator's endpoint ------------------------------------------------------------------


def metrics_allowed(request) -> bool:
    """Whether ``request`` may read ``/metrics``: a signed-in superuser, or
    ``Authorization: Bearer <KB_METRICS_TOKEN>`` when that setting is set."""
    from django.conf import settings

    token = settings.KB_METRICS_TOKEN
    header = request.headers.get("Authorization", "")
    if token and header.startswith("Bearer "):
        if hmac.compare_digest(header.removeprefix("Bearer ").strip().encode(), token.encode()):
            return True
    user = getattr(request, "user", None)
    return bool(user is not None and user.is_authenticated and user.is_superuser)


def metrics_text() -> bytes:
    """Every metric in Prometheus's text format: this process's, or with
    ``PROMETHEUS_MULTIPROC_DIR`` every process's files added up; then the queue lengths."""
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        from prometheus_client import multiprocess

        registry = CollectorRegistry()
        multiprocess.MultiProcessCollector(registry)
        text = generate_latest(registry)
    else:
        text = generate_latest(REGISTRY)
    queues = CollectorRegistry(auto_describe=False)
    queues.register(QueueCollector())
    return text + generate_latest(queues)


def metrics_view(request):
    """``GET /metrics``: the metrics for the operator (``metrics_allowed``); 404 for anyone else,
    so the endpoint does not show itself."""
    from django.http import Http404, HttpResponse

    if not metrics_allowed(request):
        raise Http404
    return HttpResponse(metrics_text(), content_type=CONTENT_TYPE_LATEST)
