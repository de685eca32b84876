"""The observer of pipeline runs: its OpenTelemetry spans, its metrics, and the compact summaries
its stored trace keeps (``retrieval.traces``, which writes and prunes the trace rows).

Step summaries are made JSON-safe and compact by ``summary_compact`` so a stage can put whatever
it finds useful in its summary without bloating the trace table.

The same record goes to the operator's tools (docs/telemetry.md): ``run_observed`` wraps a
pipeline entry point in a ``kb.answer`` or ``kb.retrieve`` span (tenant, pipeline, trace id,
degradation, LLM usage) and records its latency per pipeline and per stage in Prometheus;
``step_span`` makes each step a ``kb.stage <name>`` span while the stage runs, its summary
flattened into ``kb.step.*`` attributes by ``summary_attributes``. Without an OTLP endpoint
(``core.telemetry``) no span is made and only the Prometheus histograms are fed.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import functools
import json
import math
import time
from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager, contextmanager, nullcontext
from contextvars import ContextVar
from decimal import Decimal
from numbers import Integral, Real
from typing import Any

from core import metrics, telemetry
from retrieval.types import Step

MAX_SUMMARY_ITEMS = 50  # items kept of any list (or mapping) in a summary
MAX_SUMMARY_CHARS = 2000  # characters kept of any string in a summary
_MAX_DEPTH = 8  # deeper values are stored as their (capped) text


def summary_compact(value: Any, *, _depth: int = 0) -> Any:
    """``value`` as compact, JSON-safe data.

    Lists, tuples and sets keep their first 50 items and mappings their first 50 entries (keys
    become strings); strings keep their first 2,000 characters (a cut string ends with "…").
    Non-finite floats become ``None``; decimals and numpy-like numbers become plain numbers;
    dates become ISO strings; dataclasses become dicts; anything else becomes its capped text.
    """
    if value is None or isinstance(value, bool):
        return value
    if isinstance(value, str):
        return _capped_text(value)
    if isinstance(value, Integral):
        return int(value)
    if isinstance(value, (Real, Decimal)):
        number = float(value)
        return number if math.isfinite(number) else None
    if isinstance(value, (dt.datetime, dt.date, dt.time)):
        return value.isoformat()
    if _depth >= _MAX_DEPTH:
        return _capped_text(repr(value))
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        value = {f.name: getattr(value, f.name) for f in dataclasses.fields(value)}
    if isinstance(value, Mapping):
        items = list(value.items())[:MAX_SUMMARY_ITEMS]
        return {_capped_text(str(k)): summary_compact(v, _depth=_depth + 1) for k, v in items}
    if isinstance(value, (list, tuple, set, frozenset)):
        items = sorted(value, key=repr) if isinstance(value, (set, frozenset)) else value
        return [summary_compact(v, _depth=_depth + 1) for v in list(items)[:MAX_SUMMARY_ITEMS]]
    if isinstance(value, bytes):
        return _capped_text(value.decode("utf-8", errors="replace"))
    return _capped_text(str(value))


def _capped_text(text: str) -> str:
    # PostgreSQL's jsonb rejects NUL characters.
    text = text.replace("\x00", "")
    return text if len(text) <= MAX_SUMMARY_CHARS else text[: MAX_SUMMARY_CHARS - 1] + "…"


def count_clean(value: int) -> int:
    """A count as stored and exported: a whole number, at least 0."""
    return max(int(value or 0), 0)


def ms_clean(value: float) -> float:
    """Milliseconds as stored and exported: finite, at least 0."""
    number = float(value or 0.0)
    return max(number, 0.0) if math.isfinite(number) else 0.0


# ---- Spans and metrics ---------------------------------------------------------------------------

# Summary keys whose text values are the code's own choices (a mode, a fallback's name, a stop
# reason), never the question's or the documents' text: kept when KB_OTEL_CAPTURE_QUESTIONS is off.
CATEGORICAL_KEYS = frozenset(
    {"mode", "fusion", "strategy", "by", "style", "model", "pipeline", "stop_reason", "decision", "from", "reason"}
    | {"fallback", "skipped", "kind", "as_of"}
)
# Nested mappings whose keys are the code's names (not query terms): flattened when capture is off.
STRUCTURAL_KEYS = frozenset({"counts", "filter", "access", "timings", "budget"})
MAX_STEP_ATTRIBUTES = 64  # kb.step.* attributes per span
MAX_ATTRIBUTE_CHARS = 1000  # characters of one text attribute
_FLATTEN_DEPTH = 3
_NULL = nullcontext()
# The step whose span is open in this context, so ``step_recorded`` does not make it twice.
_live_step: ContextVar[Step | None] = ContextVar("kb_live_step", default=None)


def summary_attributes(summary: Mapping | None, *, capture: bool, prefix: str = "kb.step.") -> dict[str, Any]:
    """A step summary as span attributes: ``{prefix + dotted.path: value}``, at most 64.

    Numbers and booleans are kept; a list of numbers is kept, and any other list (of text, or of
    ``[chunk id, score]`` pairs) becomes its ``.count`` (with ``capture``, also its JSON text). Text is kept only with ``capture``
    (``KB_OTEL_CAPTURE_QUESTIONS``), except under ``CATEGORICAL_KEYS``, whose values are the
    code's own words. Mappings are flattened three levels deep; without ``capture`` only those
    under ``STRUCTURAL_KEYS`` (their keys are the code's names, where others may be query terms),
    the rest become a ``.count``. Text is capped at 1,000 characters.
    """
    attributes: dict[str, Any] = {}

    def put(key: str, value: Any) -> None:
        if len(attributes) < MAX_STEP_ATTRIBUTES:
            attributes[key] = value

    def walk(path: str, key: str, value: Any, depth: int) -> None:
        if value is None:
            return
        if isinstance(value, bool) or isinstance(value, Integral):
            put(path, int(value) if not isinstance(value, bool) else value)
        elif isinstance(value, (Real, Decimal)):
            number = float(value)
            if math.isfinite(number):
                put(path, number)
        elif isinstance(value, str):
            if capture or key in CATEGORICAL_KEYS:
                put(path, _attribute_text(value))
        elif isinstance(value, Mapping):
            if depth < _FLATTEN_DEPTH and (capture or key in STRUCTURAL_KEYS or depth == 0):
                for k, v in list(value.items())[:MAX_SUMMARY_ITEMS]:
                    walk(f"{path}.{k}" if path else f"{prefix}{k}", str(k), v, depth + 1)
            else:
                put(f"{path}.count", len(value))
                if capture:
                    put(path, _attribute_text(json.dumps(summary_compact(value))))
        elif isinstance(value, (list, tuple, set, frozenset)):
            items = list(value)
            if all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in items):
                # One type per list: integers, or all as floats when any is one.
                kind = float if any(isinstance(v, float) for v in items) else int
                put(path, [kind(v) for v in items[:MAX_SUMMARY_ITEMS]])
            else:
                put(f"{path}.count", len(items))
                if capture:
                    put(path, _attribute_text(json.dumps(summary_compact(items))))
        elif capture:
            put(path, _attribute_text(str(summary_compact(value))))

    walk("", "", dict(summary or {}), 0)
    return attributes


def _attribute_text(text: str) -> str:
    return text if len(text) <= MAX_ATTRIBUTE_CHARS else text[: MAX_ATTRIBUTE_CHARS - 1] + "…"


def tenant_attributes(tenant) -> dict[str, Any]:
    """``kb.tenant.id`` and ``kb.tenant.slug`` of ``tenant`` (none for ``None``)."""
    if tenant is None:
        return {}
    return {"kb.tenant.id": getattr(tenant, "pk", None), "kb.tenant.slug": getattr(tenant, "slug", None)}


def step_span(state, record: Step) -> AbstractContextManager:
    """``with step_span(state, step):`` the span of ``step`` while its stage runs (``RunState.step``).

    The span, ``kb.stage <stage>``, is current inside the block (so the stage's LLM calls are its
    children) and gets the step's time, summary (``summary_attributes``), LLM usage and error
    when the block ends. A no-op when telemetry is off.
    """
    if not telemetry.telemetry_enabled():
        return _NULL
    return _step_span(state, record)


@contextmanager
def _step_span(state, record: Step):
    token = _live_step.set(record)
    try:
        with telemetry.span(f"kb.stage {record.stage}", attributes=_step_base(state, record)) as span:
            try:
                yield
            finally:
                _step_finish(span, record)
    finally:
        _live_step.reset(token)


def step_recorded(state, record: Step) -> None:
    """Make the span of a step recorded without ``step_span`` (``RunState.step_add`` of a
    finished step, e.g. ``scope``): it ends now and began ``record.ms`` ago. A no-op when
    telemetry is off or the step's span is already open."""
    if _live_step.get() is record or not telemetry.telemetry_enabled():
        return
    end_ns = time.time_ns()
    span = telemetry.span_start(
        f"kb.stage {record.stage}",
        attributes=_step_base(state, record),
        start_ns=end_ns - int(ms_clean(record.ms) * 1e6),
    )
    _step_finish(span, record)
    span.end(end_time=end_ns)


def _step_base(state, record: Step) -> dict[str, Any]:
    spec = getattr(state, "spec", None)
    return {
        "kb.stage": record.stage,
        "kb.pipeline": getattr(spec, "name", None),
        **tenant_attributes(getattr(state, "tenant", None)),
    }


def _step_finish(span, record: Step) -> None:
    if span is None:
        return
    capture = telemetry.capture_text()
    attributes = summary_attributes(record.summary, capture=capture)
    attributes["kb.step.ms"] = round(ms_clean(record.ms), 3)
    if record.usage.llm_calls:
        attributes["kb.llm.calls"] = count_clean(record.usage.llm_calls)
        attributes["kb.llm.tokens_in"] = count_clean(record.usage.tokens_in)
        attributes["kb.llm.tokens_out"] = count_clean(record.usage.tokens_out)
    if record.error:
        attributes["kb.step.degraded"] = True
        if capture:
            attributes["kb.step.error"] = _attribute_text(record.error)
    span.set_attributes(attributes)  # one call: each set_attribute takes the span's lock
    if record.error:
        telemetry.span_fail(span, _attribute_text(record.error) if capture else "the stage degraded")


def run_observed(operation: str) -> Callable:
    """Decorate a pipeline entry point (``run(request, **kwargs)``: an ``AnswerRequest`` and
    keyword arguments; ``operation`` ``answer`` or ``retrieve``) that returns a run with
    ``pipeline``, ``steps``, ``usage`` and ``degraded``.

    Each call is a ``kb.<operation>`` span (tenant, pipeline, the answer's trace id, degraded
    stages, LLM usage; the question's text only with ``KB_OTEL_CAPTURE_QUESTIONS``), and its wall
    time and every step's go to ``kb_pipeline_run_duration_seconds`` and
    ``kb_pipeline_stage_duration_seconds``. An exception is recorded (outcome ``error``) and
    propagates unchanged.
    """

    def decorate(run: Callable) -> Callable:
        @functools.wraps(run)
        def observed(request, **kwargs):
            started = time.perf_counter()
            question = request.question
            base = {
                "kb.operation": operation,
                "kb.question.chars": len(question),
                **tenant_attributes(kwargs.get("tenant")),
            }
            if telemetry.telemetry_enabled() and telemetry.capture_text():
                base["kb.question"] = _attribute_text(question)
            with telemetry.span(f"kb.{operation}", attributes=base) as span:
                try:
                    result = run(request, **kwargs)
                except Exception:
                    requested = request.pipeline
                    pipeline = getattr(requested, "name", requested) if requested else ""
                    metrics.pipeline_run_observe(
                        operation=operation,
                        pipeline=str(pipeline),
                        outcome="error",
                        seconds=time.perf_counter() - started,
                    )
                    raise
                metrics.pipeline_run_observe(
                    operation=operation,
                    pipeline=result.pipeline,
                    outcome="degraded" if result.degraded else "ok",
                    seconds=time.perf_counter() - started,
                    stages=[(step.stage, ms_clean(step.ms) / 1000) for step in result.steps],
                )
                if span is not None:
                    _run_finish(span, result)
            return result

        return observed

    return decorate


def _run_finish(span, result) -> None:
    degraded = [step.stage for step in result.steps if step.error]
    attributes = {
        "kb.pipeline": result.pipeline,
        "kb.degraded": bool(result.degraded),
        "kb.degraded_stages": degraded or None,
        "kb.trace_id": getattr(result, "trace_id", None),
        "kb.llm.calls": count_clean(result.usage.llm_calls),
        "kb.llm.tokens_in": count_clean(result.usage.tokens_in),
        "kb.llm.tokens_out": count_clean(result.usage.tokens_out),
        "kb.llm.cost_usd": float(result.usage.cost_usd or 0.0),
    }
    answer = getattr(result, "answer", None)
    if answer is not None:
        attributes["kb.citations"] = len(answer.citations)
    results = getattr(result, "results", None)
    if results is not None:
        attributes["kb.results"] = len(results)
    span.set_attributes(telemetry.attributes_clean(attributes))
