"""Tracing overhead: p50/p95 (ms) of searches and answers with tracing or telemetry on and off.

Usage: python benchmarks/trace_overhead.py [--tenant demo] [--rounds 3] [--telemetry]

Without ``--telemetry``: the ``simple`` answer pipeline with its trace (``KB_TRACING``) written
and not, in this process. With ``--telemetry``: searches (``chunk_search``) and ``simple``
answers, traced as usual, in two worker processes of this script, one with no
``OTEL_EXPORTER_OTLP_ENDPOINT`` (telemetry off: nothing of the tracing SDK is imported) and one
exporting every span to an OTLP/HTTP receiver that this process runs on 127.0.0.1 (it decodes
each request and counts the spans). This process hands each question to both workers in turn
and reads back their own timings.

Answers are extractive (no LLM), so the figures are the pipeline's own work plus what is
measured. The two settings take turns on each question (interleaved, the first alternating),
after one warm-up pass. Prints one JSON object; the target is ``on_over_off_p50`` <= 1.05.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from _setup import django_setup
from _toolkit import log, percentile
from search_latency import QUESTIONS


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--tenant", default="demo")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--telemetry", action="store_true", help="compare OpenTelemetry off and on")
    parser.add_argument("--worker", choices=["off", "on"], help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(args.tenant)
    elif args.telemetry:
        telemetry_compare(args.tenant, args.rounds)
    else:
        tracing_compare(args.tenant, args.rounds)


def tracing_compare(slug: str, rounds: int) -> None:
    """The trace written or not, interleaved in this process."""
    django_setup()
    from core.models import Tenant
    from knowledge.models import Chunk
    from retrieval.models import Trace
    from retrieval.pipeline import pipeline_answer
    from retrieval.request import AnswerRequest

    tenant = Tenant.objects.filter(slug=slug).first()
    if tenant is None:
        raise SystemExit(f"No tenant {slug!r}: run the demo first.")
    for question in QUESTIONS:  # warm-up: model load, caches
        pipeline_answer(AnswerRequest(question=question, pipeline="simple", use_llm=False), tenant=tenant, trace=False)
    times: dict[str, list[float]] = {"on": [], "off": []}
    written: list[int] = []
    for round_ in range(rounds):
        for i, question in enumerate(QUESTIONS):
            order = ("on", "off") if (i + round_) % 2 == 0 else ("off", "on")
            for setting in order:
                started = time.perf_counter()
                run = pipeline_answer(
                    AnswerRequest(question=question, pipeline="simple", use_llm=False),
                    tenant=tenant,
                    trace=setting == "on",
                )
                times[setting].append((time.perf_counter() - started) * 1000)
                if run.trace_id:
                    written.append(run.trace_id)
    Trace.objects.filter(pk__in=written).delete()  # leave the tenant's traces as they were
    output = {
        "tenant": tenant.slug,
        "chunks": Chunk.objects.for_tenant(tenant).count(),
        "pipeline": "simple",
        "answers_per_setting": len(times["on"]),
        "tracing": {
            setting: {
                "p50_ms": round(percentile(values, 50), 1),
                "p95_ms": round(percentile(values, 95), 1),
                "mean_ms": round(statistics.mean(values), 1),
            }
            for setting, values in times.items()
        },
    }
    output["on_over_off_p50"] = round(output["tracing"]["on"]["p50_ms"] / output["tracing"]["off"]["p50_ms"], 3)
    print(json.dumps(output, indent=2))


# ---- OpenTelemetry off and on ---------------------------------------------------------------------

OPERATIONS = ("search", "ask")


def worker(slug: str) -> None:
    """A worker process: warm up, say ``ready``, then time each ``{"op", "question"}`` line read
    from stdin and answer ``{"ms"}``; on an empty line, delete the traces it wrote, export what
    is left and answer what it knows of its telemetry."""
    django_setup()
    from core.models import Tenant
    from core.telemetry import telemetry_enabled, telemetry_flush
    from retrieval.models import Trace
    from retrieval.pipeline import pipeline_answer
    from retrieval.request import AnswerRequest
    from retrieval.search import chunk_search

    tenant = Tenant.objects.get(slug=slug)
    written: list[int] = []

    def run(op: str, question: str) -> float:
        started = time.perf_counter()
        if op == "search":
            chunk_search(AnswerRequest(question=question, k=10), tenant=tenant)
        else:
            answer = pipeline_answer(AnswerRequest(question=question, pipeline="simple", use_llm=False), tenant=tenant)
            written.append(answer.trace_id)
        return (time.perf_counter() - started) * 1000

    for question in QUESTIONS:  # warm-up: model load, caches, the exporter's first connection
        for op in OPERATIONS:
            run(op, question)
    print("ready", flush=True)
    for line in sys.stdin:
        if not line.strip():
            break
        command = json.loads(line)
        print(json.dumps({"ms": run(command["op"], command["question"])}), flush=True)
    flushed = telemetry_flush()
    Trace.objects.filter(pk__in=[pk for pk in written if pk]).delete()
    tracing_modules = sorted(
        m for m in sys.modules if m.startswith(("opentelemetry.sdk.trace", "opentelemetry.exporter"))
    )
    report = {"enabled": telemetry_enabled(), "flushed": flushed, "tracing_modules": tracing_modules}
    if not report["enabled"]:
        report["hooks_us_per_answer"] = hooks_cost_us()
    print(json.dumps(report), flush=True)


def hooks_cost_us(steps: int = 8, repeat: int = 5000) -> float:
    """Microseconds that the telemetry hooks of one answer of ``steps`` steps cost in this process:
    the run's wrapper (its Prometheus histograms included) around a function that does nothing,
    and each step's span hooks (``step_span``, ``step_recorded``); the best of three timings."""
    import timeit
    from types import SimpleNamespace

    from llm import Usage
    from retrieval.tracing import run_observed, step_recorded, step_span
    from retrieval.types import Step

    state = SimpleNamespace(tenant=None, spec=SimpleNamespace(name="simple"))
    records = [Step(stage=f"stage{i}", ms=1.0) for i in range(steps)]
    result = SimpleNamespace(pipeline="simple", steps=records, usage=Usage(), degraded=False, trace_id=None)
    observed = run_observed("answer")(lambda **kwargs: result)

    def answer() -> None:
        observed(tenant=None, question="a question")
        for record in records:
            with step_span(state, record):
                pass
            step_recorded(state, record)

    best = min(timeit.repeat(answer, number=repeat, repeat=3))
    return round(best / repeat * 1e6, 1)


class _Receiver(BaseHTTPRequestHandler):
    """OTLP/HTTP traces: decodes each request (as a collector would) and counts its spans."""

    spans = 0
    lock = threading.Lock()

    def do_POST(self):  # noqa: N802 - http.server's name
        from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

        request = ExportTraceServiceRequest()
        request.ParseFromString(self.rfile.read(int(self.headers.get("Content-Length", 0))))
        count = sum(len(scope.spans) for spans in request.resource_spans for scope in spans.scope_spans)
        with _Receiver.lock:
            _Receiver.spans += count
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args) -> None:
        pass


def _worker_start(setting: str, slug: str, endpoint: str) -> subprocess.Popen:
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    if setting == "on":
        env.update(OTEL_EXPORTER_OTLP_ENDPOINT=endpoint, OTEL_SERVICE_NAME="kb-trace-overhead")
    command = [sys.executable, str(Path(__file__).resolve()), "--worker", setting, "--tenant", slug]
    process = subprocess.Popen(command, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    for line in process.stdout:  # anything a library prints before it is ready is passed over
        if line.strip() == "ready":
            return process
    raise SystemExit(f"The {setting} worker did not start.")


def telemetry_compare(slug: str, rounds: int) -> None:
    """Searches and answers in a worker with telemetry off and one exporting to a local receiver."""
    django_setup()
    from core.models import Tenant
    from knowledge.models import Chunk

    tenant = Tenant.objects.filter(slug=slug).first()
    if tenant is None:
        raise SystemExit(f"No tenant {slug!r}: run the demo first.")
    chunks = Chunk.objects.for_tenant(tenant).count()
    receiver = ThreadingHTTPServer(("127.0.0.1", 0), _Receiver)
    threading.Thread(target=receiver.serve_forever, daemon=True).start()
    endpoint = f"http://127.0.0.1:{receiver.server_address[1]}"
    load_before = os.getloadavg()
    workers = {setting: _worker_start(setting, slug, endpoint) for setting in ("off", "on")}
    log(f"workers ready; {rounds} rounds of {len(QUESTIONS)} questions")
    times = {op: {"off": [], "on": []} for op in OPERATIONS}
    for round_ in range(rounds):
        for i, question in enumerate(QUESTIONS):
            order = ("on", "off") if (i + round_) % 2 == 0 else ("off", "on")
            for op in OPERATIONS:
                for setting in order:
                    process = workers[setting]
                    process.stdin.write(json.dumps({"op": op, "question": question}) + "\n")
                    process.stdin.flush()
                    times[op][setting].append(json.loads(process.stdout.readline())["ms"])
    reports = {}
    for setting, process in workers.items():
        process.stdin.write("\n")
        process.stdin.flush()
        reports[setting] = json.loads(process.stdout.readline())
        process.wait(60)
    receiver.shutdown()
    output = {
        "tenant": tenant.slug,
        "chunks": chunks,
        "cores": os.cpu_count(),
        "load_average_before_after": [round(load_before[0], 2), round(os.getloadavg()[0], 2)],
        "per_setting": {op: len(times[op]["on"]) for op in OPERATIONS},
    }
    for op in OPERATIONS:
        summary = {
            setting: {
                "p50_ms": round(percentile(values, 50), 1),
                "p95_ms": round(percentile(values, 95), 1),
                "mean_ms": round(statistics.mean(values), 1),
            }
            for setting, values in times[op].items()
        }
        summary["on_over_off_p50"] = round(summary["on"]["p50_ms"] / summary["off"]["p50_ms"], 3)
        summary["on_over_off_mean"] = round(summary["on"]["mean_ms"] / summary["off"]["mean_ms"], 3)
        output[op] = summary
    output["spans_received"] = _Receiver.spans  # the warm-up's included
    output["off_worker"] = reports["off"]
    output["on_worker"] = reports["on"]
    print(json.dumps(output, indent=2))


if __name__ == "__main__":
    main()
