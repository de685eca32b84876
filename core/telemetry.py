"""OpenTelemetry traces: set up once per process, and free when no endpoint is configured.

Telemetry is on in a process when ``OTEL_EXPORTER_OTLP_ENDPOINT`` (or
``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT``) is set and ``OTEL_SDK_DISABLED`` is not true. Spans then go
through the official SDK (a ``BatchSpanProcessor`` and the OTLP/HTTP protobuf exporter), which
reads the other standard variables itself: ``OTEL_SERVICE_NAME`` (default ``knowledge-base``
here), ``OTEL_RESOURCE_ATTRIBUTES``, ``OTEL_EXPORTER_OTLP_HEADERS``, ``OTEL_TRACES_SAMPLER``,
``OTEL_BSP_*`` and the like (docs/telemetry.md).

Off, nothing of the SDK is imported: ``span`` returns one shared no-op context manager and
``span_start`` returns ``None``, after one check of a module variable.

Each process sets telemetry up once: gunicorn workers in ``post_fork`` (Django requests and
Celery publishing instrumented before the app loads), Celery workers in ``worker_process_init``
(tasks instrumented), and any other process (management commands, benchmarks) lazily at its
first span, without instrumentation. A forked child forgets its parent's decision and decides
again, so no process exports through another's background thread.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Mapping
from contextlib import AbstractContextManager, nullcontext
from typing import Any

from django.core.exceptions import ImproperlyConfigured

logger = logging.getLogger(__name__)

DEFAULT_SERVICE_NAME = "knowledge-base"
# The standard variables that turn spans on (``telemetry_endpoints``).
ENDPOINT_VARIABLES = ("OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
_TRUE = {"1", "true", "yes", "on"}
_OFF = "off"
_NULL = nullcontext(None)

# None: not decided yet in this process; _OFF: no endpoint; else the live _Telemetry.
_state: Any = None
_lock = threading.Lock()


class _Telemetry:
    """The process's tracer provider, its tracer and the instrumentors it switched on."""

    def __init__(self) -> None:
        from opentelemetry import trace
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor

        attributes = {}
        if not _service_name_configured():
            attributes["service.name"] = DEFAULT_SERVICE_NAME
        self.provider = TracerProvider(resource=Resource.create(attributes))
        self.provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
        self.tracer = self.provider.get_tracer("knowledge-base")
        self.instrumentors: list[Any] = []
        self.kinds = {
            "internal": trace.SpanKind.INTERNAL,
            "client": trace.SpanKind.CLIENT,
            "server": trace.SpanKind.SERVER,
        }
        self.status_error = trace.StatusCode.ERROR
        self.status = trace.Status
        # The first provider of the process becomes the global one, for any other instrumentation;
        # this module's spans always use its own provider.
        if isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider):
            trace.set_tracer_provider(self.provider)

    def instrument(self, *, django: bool, celery: bool) -> None:
        if django:
            from opentelemetry.instrumentation.django import DjangoInstrumentor

            self._instrument(DjangoInstrumentor(), request_hook=_request_query_dropped)
        if celery:
            from opentelemetry.instrumentation.celery import CeleryInstrumentor

            self._instrument(CeleryInstrumentor())

    def _instrument(self, instrumentor: Any, **options: Any) -> None:
        if any(type(done) is type(instrumentor) for done in self.instrumentors):
            return
        if instrumentor.is_instrumented_by_opentelemetry:
            return  # instrumented before this process forked: its spans already flow
        instrumentor.instrument(tracer_provider=self.provider, **options)
        self.instrumentors.append(instrumentor)


def _request_query_dropped(span: Any, request: Any) -> None:
    """A Django request span's URL without its query string, unless ``KB_OTEL_CAPTURE_QUESTIONS``:
    a query string may carry what a user typed."""
    if span is None or not span.is_recording() or not request.META.get("QUERY_STRING") or capture_text():
        return
    attributes = getattr(span, "attributes", None) or {}
    if "http.url" in attributes:
        span.set_attribute("http.url", str(attributes["http.url"]).split("?", 1)[0])
    if "http.target" in attributes:
        span.set_attribute("http.target", str(attributes["http.target"]).split("?", 1)[0])
    if "url.query" in attributes:
        span.set_attribute("url.query", "")


def telemetry_endpoints() -> dict[str, str]:
    """The OTLP endpoints the environment sets, by variable (``OTEL_EXPORTER_OTLP_ENDPOINT``,
    ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT``); empty when neither is set. ``ImproperlyConfigured``
    naming the variable for a value that is not an http(s) URL.

    The one place they are read: the settings call it so a bad value stops the start, and the
    decision to export reads the environment at each setup (a gunicorn worker decides before the
    app and its settings load; the SDK's exporter reads the same variables itself)."""
    endpoints = {name: os.environ.get(name, "").strip() for name in ENDPOINT_VARIABLES}
    endpoints = {name: value for name, value in endpoints.items() if value}
    for name, value in endpoints.items():
        if value.split("://", 1)[0] not in ("http", "https"):
            raise ImproperlyConfigured(f"{name}={value!r} must be a URL starting with one of: http://, https://")
    return endpoints


def telemetry_wanted() -> bool:
    """Whether the environment asks for spans: an OTLP endpoint is set and the SDK is not disabled."""
    if os.environ.get("OTEL_SDK_DISABLED", "").strip().lower() in _TRUE:
        return False
    return bool(telemetry_endpoints())


def _service_name_configured() -> bool:
    if os.environ.get("OTEL_SERVICE_NAME", "").strip():
        return True
    return "service.name=" in os.environ.get("OTEL_RESOURCE_ATTRIBUTES", "")


def telemetry_setup(*, django: bool = False, celery: bool = False) -> bool:
    """Set this process's telemetry up from the environment; whether it is on.

    Idempotent: the provider is made once per process, and each of ``django`` (Django requests,
    through ``opentelemetry-instrumentation-django``; call it before the WSGI handler loads its
    middleware) and ``celery`` (published and executed tasks, ``-instrumentation-celery``) is
    instrumented at most once. With no endpoint configured it records that telemetry is off and
    imports nothing of the SDK.
    """
    global _state
    with _lock:
        if not telemetry_wanted():
            _state = _OFF
            return False
        if not isinstance(_state, _Telemetry):
            _state = _Telemetry()
        _state.instrument(django=django, celery=celery)
        return True


def telemetry_shutdown() -> None:
    """Export the spans still queued, stop the exporter and the instrumentations, and forget the
    decision (the next span decides again from the environment). For a process's end and tests."""
    global _state
    with _lock:
        state, _state = _state, None
    if isinstance(state, _Telemetry):
        for instrumentor in reversed(state.instrumentors):
            try:
                instrumentor.uninstrument()
            except Exception:  # noqa: BLE001 - shutting down: report and go on
                logger.exception("Could not uninstrument %s", type(instrumentor).__name__)
        state.provider.shutdown()


def telemetry_flush(timeout_ms: int = 30_000) -> bool:
    """Export every span finished so far (waits at most ``timeout_ms``); whether all went out.
    True at once when telemetry is off."""
    state = _active()
    return True if state is None else state.provider.force_flush(timeout_ms)


def _active() -> _Telemetry | None:
    state = _state
    if state is None:
        telemetry_setup()
        state = _state
    return None if state is _OFF else state


def telemetry_enabled() -> bool:
    """Whether spans are exported in this process (decided at the first call, from the environment)."""
    return _active() is not None


def capture_text() -> bool:
    """Whether spans may carry the question and text derived from it (``KB_OTEL_CAPTURE_QUESTIONS``)."""
    from django.conf import settings

    return settings.KB_OTEL_CAPTURE_QUESTIONS


def span(name: str, *, attributes: Mapping[str, Any] | None = None, kind: str = "internal") -> AbstractContextManager:
    """``with span(name, attributes=...) as s:`` a span that is current inside the block.

    ``s`` is the OpenTelemetry span, or ``None`` when telemetry is off (the block runs all the
    same). ``kind`` is ``internal``, ``client`` or ``server``. An exception leaving the block is
    recorded on the span, whose status becomes an error, and propagates.
    """
    state = _active()
    if state is None:
        return _NULL
    return state.tracer.start_as_current_span(name, kind=state.kinds[kind], attributes=attributes_clean(attributes))


def span_start(
    name: str, *, attributes: Mapping[str, Any] | None = None, kind: str = "internal", start_ns: int | None = None
) -> Any:
    """A started span that is not made current (the caller ends it with ``span.end()``), child of
    the current span; ``None`` when telemetry is off. ``start_ns``: its start in
    ``time.time_ns()`` nanoseconds (default now)."""
    state = _active()
    if state is None:
        return None
    return state.tracer.start_span(
        name, kind=state.kinds[kind], attributes=attributes_clean(attributes), start_time=start_ns
    )


def span_fail(span_: Any, description: str | None = None, *, error_type: str | None = None) -> None:
    """Mark ``span_`` (may be ``None``) as failed: status error with ``description``, and the
    semantic ``error.type`` attribute when given."""
    state = _active()
    if span_ is None or state is None:
        return
    if error_type:
        span_.set_attribute("error.type", error_type)
    span_.set_status(state.status(state.status_error, description))


def attributes_clean(attributes: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """``attributes`` as OpenTelemetry accepts them: ``None`` values dropped, tuples as lists,
    other objects as their text."""
    if not attributes:
        return None
    clean: dict[str, Any] = {}
    for key, value in attributes.items():
        if value is None:
            continue
        if isinstance(value, (bool, int, float, str)):
            clean[key] = value
        elif isinstance(value, (list, tuple)) and all(isinstance(v, (bool, int, float, str)) for v in value):
            clean[key] = list(value)
        else:
            clean[key] = str(value)
    return clean


def _forget_in_child() -> None:
    """After a fork: the parent's provider exports through the parent's thread; decide again."""
    global _state, _lock
    _state = None
    _lock = threading.Lock()


os.register_at_fork(after_in_child=_forget_in_child)
