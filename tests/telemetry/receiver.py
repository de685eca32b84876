"""Two loopback servers for the telemetry tests: an OTLP/HTTP receiver and a scripted LLM endpoint.

``OTLPReceiver`` takes what the official exporter sends to ``/v1/traces`` (an
``ExportTraceServiceRequest`` in protobuf, gzipped or not) and keeps every span it decodes, with
its resource's attributes. ``LLMEndpoint`` is an OpenAI-compatible ``/v1/chat/completions`` that
answers every request with one reply (as a completion, or streamed as server-sent events)
and reports ``usage``, or answers with an HTTP error when told to.
"""

from __future__ import annotations

import gzip
import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)

KINDS = {1: "internal", 2: "server", 3: "client", 4: "producer", 5: "consumer"}


@dataclass
class ReceivedSpan:
    """One decoded span: ids as hex, ``kind`` as a word, ``status`` "unset", "ok" or "error"."""

    name: str
    trace_id: str
    span_id: str
    parent_id: str
    kind: str
    attributes: dict[str, Any]
    status: str
    resource: dict[str, Any] = field(default_factory=dict)

    def values(self) -> list[str]:
        """Every attribute value as text (lists joined), to look for a string anywhere."""
        return [json.dumps(v) if isinstance(v, list) else str(v) for v in self.attributes.values()]


def _value(any_value) -> Any:
    which = any_value.WhichOneof("value")
    if which == "array_value":
        return [_value(v) for v in any_value.array_value.values]
    if which == "kvlist_value":
        return {kv.key: _value(kv.value) for kv in any_value.kvlist_value.values}
    return getattr(any_value, which) if which else None


def _attributes(key_values) -> dict[str, Any]:
    return {kv.key: _value(kv.value) for kv in key_values}


class _Server:
    def __init__(self, handler: type[BaseHTTPRequestHandler]):
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.server.owner = self  # type: ignore[attr-defined]
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.server.shutdown()
        self.server.server_close()


class OTLPReceiver(_Server):
    """A receiver of OTLP/HTTP protobuf traces on 127.0.0.1 (``url`` is the exporter's endpoint)."""

    def __init__(self):
        super().__init__(_OTLPHandler)
        self._spans: list[ReceivedSpan] = []
        self._lock = threading.Lock()
        self.requests = 0

    def add(self, body: bytes) -> None:
        request = ExportTraceServiceRequest()
        request.ParseFromString(body)
        with self._lock:
            self.requests += 1
            for resource_spans in request.resource_spans:
                resource = _attributes(resource_spans.resource.attributes)
                for scope_spans in resource_spans.scope_spans:
                    for span in scope_spans.spans:
                        self._spans.append(
                            ReceivedSpan(
                                name=span.name,
                                trace_id=span.trace_id.hex(),
                                span_id=span.span_id.hex(),
                                parent_id=span.parent_span_id.hex(),
                                kind=KINDS.get(span.kind, "unspecified"),
                                attributes=_attributes(span.attributes),
                                status={0: "unset", 1: "ok", 2: "error"}[span.status.code],
                                resource=resource,
                            )
                        )

    def spans(self) -> list[ReceivedSpan]:
        with self._lock:
            return list(self._spans)

    def named(self, name: str) -> list[ReceivedSpan]:
        return [s for s in self.spans() if s.name == name]

    def wait_for(self, found: Callable[[list[ReceivedSpan]], Any], timeout_s: float = 30.0) -> Any:
        """Wait until ``found(spans)`` is truthy and return it; ``AssertionError`` after ``timeout_s``."""
        deadline = time.monotonic() + timeout_s
        while True:
            result = found(self.spans())
            if result:
                return result
            if time.monotonic() > deadline:
                raise AssertionError(f"Not received in {timeout_s} s; spans: {[s.name for s in self.spans()]}")
            time.sleep(0.05)


class _OTLPHandler(BaseHTTPRequestHandler):
    def do_POST(self):  # noqa: N802 - http.server's name
        body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
        if self.headers.get("Content-Encoding") == "gzip":
            body = gzip.decompress(body)
        if self.path != "/v1/traces" or self.headers.get("Content-Type") != "application/x-protobuf":
            self.send_response(404)
            self.end_headers()
            return
        self.server.owner.add(body)
        reply = ExportTraceServiceResponse().SerializeToString()
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", str(len(reply)))
        self.end_headers()
        self.wfile.write(reply)

    def log_message(self, *args) -> None:
        pass


class LLMEndpoint(_Server):
    """An OpenAI-compatible endpoint that replies ``reply`` (text) with usage ``usage`` (prompt,
    completion tokens), or HTTP ``fail_status`` when that is set."""

    def __init__(self, reply: str, *, usage: tuple[int, int] = (12, 4), model: str = "scripted-model"):
        super().__init__(_LLMHandler)
        self.reply, self.usage, self.model = reply, usage, model
        self.fail_status: int | None = None


class _LLMHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_POST(self):  # noqa: N802 - http.server's name
        endpoint: LLMEndpoint = self.server.owner
        request = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
        if endpoint.fail_status:
            self._send(endpoint.fail_status, {"error": {"message": "scripted failure"}})
            return
        text = endpoint.reply
        usage = {"prompt_tokens": endpoint.usage[0], "completion_tokens": endpoint.usage[1]}
        if not request.get("stream"):
            message = {"role": "assistant", "content": text}
            body = {
                "id": "c1",
                "object": "chat.completion",
                "created": 0,
                "model": endpoint.model,
                "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
                "usage": {**usage, "total_tokens": sum(endpoint.usage)},
            }
            self._send(200, body)
            return
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Connection", "close")
        self.end_headers()
        pieces = [text[i : i + 8] for i in range(0, len(text), 8)]
        for piece in pieces:
            chunk = {"id": "c1", "object": "chat.completion.chunk", "created": 0, "model": endpoint.model}
            chunk["choices"] = [{"index": 0, "delta": {"content": piece}, "finish_reason": None}]
            self.wfile.write(f"data: {json.dumps(chunk)}\n\n".encode())
        last = {"id": "c1", "object": "chat.completion.chunk", "created": 0, "model": endpoint.model, "choices": []}
        last["usage"] = {**usage, "total_tokens": sum(endpoint.usage)}
        self.wfile.write(f"data: {json.dumps(last)}\n\ndata: [DONE]\n\n".encode())
        self.wfile.flush()
        self.close_connection = True

    def _send(self, status: int, body: dict) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args) -> None:
        pass
