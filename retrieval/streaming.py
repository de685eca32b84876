"""An answer run as a stream of Server-Sent Events: its steps, the answer's text, then the answer.

``answer_events`` runs ``retrieval.pipeline.pipeline_answer`` in a worker thread and yields the
run as SSE frames (WHATWG HTML Living Standard, "Server-sent events": ``event: <name>`` and one
``data: <json>`` line, a blank line after each frame) while it happens:

================  ===============================================================================
``step``          after each stage: ``{"stage", "ms", "summary", "error"?}``; the summary is the
                  step's own (queries, candidates kept, passages, the LLM's reply...), compacted
                  like a trace's
``short_answer``  once, when the LLM has written its short answer: ``{"text"}`` (LLM answers
                  only, and only when it gave one; before the explanation's tokens)
``token``         a piece of the explanation's text as the LLM streams it: ``{"text"}``, the
                  decoded text of the reply's JSON ``answer`` field, never raw JSON (LLM answers
                  only; the ``answer`` event's text, with checked citations, is the one to keep)
``answer``        once, last: the answer as ``POST /api/v1/ask/`` returns it (short_answer,
                  answer, citations, sentences, citation_coverage, unsupported, pipeline,
                  trace_id, degraded, steps, usage), shaped by the caller's ``present``
``error``         instead of ``answer`` when the run failed: ``{"error": {"code", "message"}}``,
                  the API's error shape; the stream then ends normally, never as a cut connection
================  ===============================================================================

A comment frame (``: keep-alive``) goes out every ``KEEPALIVE_S`` seconds without events, so
proxies do not close a connection that waits for a slow LLM. Callers stream an ask through
``people.asking.ask_stream`` (the REST ``people.ask_apis.AskStreamApi`` and the portal's
``portal.views.ask_stream``), which passes its run as ``runner``.
"""

from __future__ import annotations

import contextvars
import json
import logging
import queue
import threading
from collections.abc import Callable, Iterator
from typing import Any

from django.db import connection

from core.errors import ApplicationError
from retrieval.pipeline import pipeline_answer
from retrieval.request import AnswerRequest
from retrieval.tracing import summary_compact

logger = logging.getLogger(__name__)

KEEPALIVE_S = 15.0  # seconds between keep-alive comments while the run is silent
CONTENT_TYPE = "text/event-stream"
# Headers of a streamed response: no caching, and no buffering by nginx (``X-Accel-Buffering``).
HEADERS = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
INTERNAL_ERROR = {"code": "internal_error", "message": "The answer could not be made; please try again."}

_DONE = object()


class _Cancelled(Exception):
    """Raised inside the worker's event callback once the client has gone: stops the run."""


def sse_frame(event: str, data: Any) -> str:
    """One SSE frame: ``event: <event>``, ``data: <data as compact JSON>``, a blank line.

    JSON never holds a raw newline (``json.dumps`` escapes them), so the data is one line.
    """
    payload = json.dumps(data, ensure_ascii=False, separators=(",", ":"))
    return f"event: {event}\ndata: {payload}\n\n"


def error_body(exc: BaseException) -> dict:
    """The API's error shape for ``exc``: its code and message for an ``ApplicationError``, else
    a generic ``internal_error`` (the details go to the log, not to the client)."""
    if isinstance(exc, ApplicationError):
        return {"error": {"code": exc.code, "message": exc.message}}
    return {"error": dict(INTERNAL_ERROR)}


def answer_events(
    request: AnswerRequest,
    *,
    tenant,
    user,
    present: Callable[[dict], Any] | None = None,
    keepalive_s: float = KEEPALIVE_S,
    runner: Callable[..., Any] = pipeline_answer,
    **run_options,
) -> Iterator[str]:
    """SSE frames of one answer run of ``request`` (``retrieval.request.AnswerRequest``) over
    ``tenant``'s documents, as the run goes (see the module). ``tenant`` must already be the
    caller's (resolve it in the request, before streaming); ``user`` is recorded on the trace;
    ``run_options`` are ``runner``'s other keyword arguments (``pipeline_answer``'s: ``llm``...).
    ``present(answer_dict) -> data`` shapes the final ``answer`` event (default:
    ``AnswerRun.as_dict()`` as is); it runs in the consuming thread. The run happens in a worker
    thread, started on the first ``next()``; it closes its own database connection when done.
    Every error, including a bad request (``InvalidInput``), becomes one ``error`` frame. Closing
    the generator early (the client went away) stops the run at its next event.
    """
    events: queue.Queue = queue.Queue()
    cancelled = threading.Event()

    def on_event(event: str, data: dict) -> None:
        if cancelled.is_set():
            raise _Cancelled
        if event == "step":
            data = {**data, "summary": summary_compact(data.get("summary") or {})}
        events.put(sse_frame(event, data))

    def work() -> None:
        try:
            run = runner(request, tenant=tenant, user=user, on_event=on_event, **run_options)
            events.put(("answer", run.as_dict()))
        except _Cancelled:
            pass
        except Exception as exc:  # every failure must reach the client as an event
            if not isinstance(exc, ApplicationError):
                logger.exception("Streamed answer run failed")
            events.put(sse_frame("error", error_body(exc)))
        finally:
            connection.close()
            events.put(_DONE)

    # The run sees the consumer's context: its row-level-security scope (core.rls) included.
    worker = threading.Thread(target=contextvars.copy_context().run, args=(work,), name="answer-events", daemon=True)
    worker.start()
    try:
        while True:
            try:
                item = events.get(timeout=keepalive_s)
            except queue.Empty:
                yield ": keep-alive\n\n"
                continue
            if item is _DONE:
                return
            if isinstance(item, tuple):
                _, answer = item
                try:
                    data = present(answer) if present is not None else answer
                except Exception as exc:  # the run is done; the client still gets an event
                    logger.exception("Presenting a streamed answer failed")
                    yield sse_frame("error", error_body(exc))
                else:
                    yield sse_frame("answer", data)
                continue
            yield item
    finally:
        cancelled.set()
