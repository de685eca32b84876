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
"""

from __future__ import annotations

import os

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
