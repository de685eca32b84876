"""gunicorn settings for serving ``config.wsgi`` in production: ``gunicorn -c config/gunicorn_conf.py``.

Read from the environment (docs/deployment.md); the process and thread counts were measured on
2 cores (``benchmarks/load.py --capacity``, docs/benchmarks.md):

- ``KB_BIND`` (``127.0.0.1:8000``): the address to listen on.
- ``KB_WEB_WORKERS`` (the number of cores): worker processes. Searches and extractive answers are
  CPU-bound Python and ONNX Runtime work, so one process per core; each holds its own embedder
  (a worker was about 400 MB resident after its first answers with the ONNX backend).
- ``KB_WEB_THREADS`` (4): request threads per worker (``gthread``). A request spends part of its
  time waiting on PostgreSQL and part holding the GIL; a few threads keep a core busy while one
  waits. 2 x 8 threads served no more searches than 2 x 4; more only queue inside the worker.
- ``KB_WEB_TIMEOUT`` (300): seconds before a silent worker is restarted; an answer through a
  local LLM can take minutes.

The workers embed queries with one ONNX Runtime thread each unless ``KB_EMBED_THREADS`` says
otherwise (requests in other threads and workers already fill the cores), run hybrid search's
vector SQL on the request's thread unless ``KB_CONCURRENT_RETRIEVERS`` says otherwise, keep their
database connections between requests (``KB_DB_CONN_MAX_AGE``), and load the embedder when they
start, so no client waits for the model.

Telemetry (docs/telemetry.md): each worker sets OpenTelemetry up right after the fork
(``post_fork``, before the app and its middleware load), so with ``OTEL_EXPORTER_OTLP_ENDPOINT``
set its requests and the tasks it queues become spans. Prometheus metrics run in
prometheus_client's multiprocess mode, every worker writing its values to files in
``PROMETHEUS_MULTIPROC_DIR`` that ``/metrics`` adds up: when the variable is unset, the workers
get a directory of their own, ``KB_DATA_DIR/metrics/gunicorn``, emptied when gunicorn starts; a
directory set by the operator (shared with Celery workers on the same machine) is theirs to
empty before the processes start.
"""

from __future__ import annotations

import os
from pathlib import Path

from config.env import env_int, env_str

bind = [env_str("KB_BIND", "127.0.0.1:8000")]
workers = env_int("KB_WEB_WORKERS", os.cpu_count() or 1, minimum=1)
threads = env_int("KB_WEB_THREADS", 4, minimum=1)
worker_class = "gthread"
timeout = env_int("KB_WEB_TIMEOUT", 300, minimum=10)
graceful_timeout = 30
keepalive = 30
# The settings module is imported by each worker (no preload): the embedder's thread pools and
# sockets are never shared across a fork.
preload_app = False
accesslog = env_str("KB_ACCESS_LOG") or None  # a path, or "-" for stdout; unset = none
errorlog = "-"
loglevel = env_str("KB_GUNICORN_LOG_LEVEL", "warning")

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
os.environ.setdefault("KB_EMBED_THREADS", "1")
# Hybrid search's vector SQL on the request's own thread and connection (the query embedding still
# overlaps BM25): with other requests filling the cores, a second connection per search only adds
# round trips and a queue for the worker's two retriever threads.
os.environ.setdefault("KB_CONCURRENT_RETRIEVERS", "false")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
# Set before any process imports prometheus_client, which reads it once.
_OWN_METRICS_DIR = not env_str("PROMETHEUS_MULTIPROC_DIR")
if _OWN_METRICS_DIR:
    _data_dir = Path(env_str("KB_DATA_DIR") or Path(__file__).resolve().parent.parent / ".kb-data")
    os.environ["PROMETHEUS_MULTIPROC_DIR"] = str(_data_dir.expanduser().resolve() / "metrics" / "gunicorn")
Path(os.environ["PROMETHEUS_MULTIPROC_DIR"]).mkdir(parents=True, exist_ok=True)


def on_starting(server) -> None:
    """Start with an empty metrics directory of our own (values of an earlier run are not ours)."""
    directory = Path(os.environ["PROMETHEUS_MULTIPROC_DIR"])
    directory.mkdir(parents=True, exist_ok=True)
    if _OWN_METRICS_DIR:
        for stale in directory.glob("*.db"):
            stale.unlink()


def post_fork(server, worker) -> None:
    """Set this worker's telemetry up before it loads the app: Django requests and the Celery
    tasks it queues are instrumented (nothing happens without an OTLP endpoint)."""
    from core.telemetry import telemetry_setup

    telemetry_setup(django=True, celery=True)


def worker_exit(server, worker) -> None:
    """Export the worker's last spans as it stops."""
    from core.telemetry import telemetry_shutdown

    telemetry_shutdown()


def child_exit(server, worker) -> None:
    """A worker ended: its live Prometheus values go with it (multiprocess mode)."""
    from prometheus_client import multiprocess

    multiprocess.mark_process_dead(worker.pid)


def post_worker_init(worker) -> None:
    """Load the default embedder in each new worker before it accepts requests (a first search
    would otherwise wait for the model); a failure is logged and left to the first request."""
    from django.conf import settings

    from knowledge.embedders import get_embedder

    if settings.KB_EMBEDDER != "local":
        return  # a remote endpoint: nothing to load
    try:
        get_embedder("local").embed_query("warm-up")
    except Exception:  # noqa: BLE001 - the first request reports it properly
        worker.log.exception("Loading the embedder failed; the first request will try again.")
