"""The LLM client against endpoints that misbehave on purpose, and once against the real local LLM.

``FakeEndpoint`` is a small OpenAI-compatible HTTP server on 127.0.0.1 that answers each request
from a per-test script (status, body, delay, headers, or a server-sent-event stream) and counts
the requests it receives and how many it was handling at once.
"""

import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from llm import (
    Completion,
    LLMBadOutput,
    LLMClient,
    LLMEmptyReply,
    LLMHTTPError,
    LLMTimeout,
    LLMUnavailable,
    circuit_reset,
    configured_llm,
)
from llm.tokenizer import count_tokens
from tests.conftest import free_port

QUESTION = [{"role": "user", "content": "How long do I boil spaghetti?"}]
MINUTES = {
    "type": "object",
    "properties": {"minutes": {"type": "integer"}, "unit": {"type": "string", "enum": ["minutes"]}},
    "required": ["minutes", "unit"],
    "additionalProperties": False,
}


@dataclass
class Reply:
    """What the fake endpoint answers to one request."""

    status: int = 200
    body: Any = None  # a dict is sent as JSON, a str as is
    delay: float = 0.0  # seconds to wait before answering
    headers: dict[str, str] = field(default_factory=dict)
    events: list[dict] | None = None  # sent as a server-sent-event stream instead of ``body``


def completion(content: str | None = "Nine to eleven minutes.", *, arguments: str | None = None, usage=(12, 4)) -> dict:
    """A chat completion body; ``arguments`` makes it a call of function ``record``."""
    message: dict[str, Any] = {"role": "assistant", "content": content}
    if arguments is not None:
        message = {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": "call_1", "type": "function", "function": {"name": "record", "arguments": arguments}}
            ],
        }
    body = {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "created": 0,
        "model": "test-model",
        "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
    }
    if usage:
        body["usage"] = {"prompt_tokens": usage[0], "completion_tokens": usage[1], "total_tokens": sum(usage)}
    return body


def chunk(content: str | None = None, *, usage=None) -> dict:
    """One chunk of a streamed chat completion."""
    choices = [] if content is None else [{"index": 0, "delta": {"content": content}, "finish_reason": None}]
    body: dict[str, Any] = {"id": "c1", "object": "chat.completion.chunk", "created": 0, "model": "test-model"}
    body["choices"] = choices
    if usage:
        body["usage"] = {"prompt_tokens": usage[0], "completion_tokens": usage[1], "total_tokens": sum(usage)}
    return body


class FakeEndpoint:
    """An OpenAI-compatible endpoint whose ``script(n, request_body)`` decides reply ``n`` (from 0)."""

    def __init__(self):
        self.script: Callable[[int, dict], Reply] = lambda n, body: Reply(body=completion())
        self.requests: list[dict] = []
        self.in_flight = 0
        self.max_in_flight = 0
        self.lock = threading.Lock()
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
        self.server.daemon_threads = True
        self.server.block_on_close = False
        self.server.endpoint = self
        self.thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        self.thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/v1"

    def replies(self, *replies: Reply) -> None:
        """Answer request n with ``replies[n]``, and every later one with the last reply."""
        self.script = lambda n, body: replies[min(n, len(replies) - 1)]

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


class _Handler(BaseHTTPRequestHandler):
    def do_POST(self):
        endpoint: FakeEndpoint = self.server.endpoint
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"{}")
        with endpoint.lock:
            n = len(endpoint.requests)
            endpoint.requests.append(body)
            endpoint.in_flight += 1
            endpoint.max_in_flight = max(endpoint.max_in_flight, endpoint.in_flight)
        try:
            reply = endpoint.script(n, body)
            time.sleep(reply.delay)
        finally:
            with endpoint.lock:  # before answering, so the client's next request never overlaps
                endpoint.in_flight -= 1
        try:
            if reply.events is not None:
                payload = "".join(f"data: {json.dumps(event)}\n\n" for event in reply.events) + "data: [DONE]\n\n"
                content_type = "text/event-stream"
            else:
                payload = reply.body if isinstance(reply.body, str) else json.dumps(reply.body or {})
                content_type = "application/json"
            data = payload.encode()
            self.send_response(reply.status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(data)))
            for name, value in reply.headers.items():
                self.send_header(name, value)
            self.end_headers()
            self.wfile.write(data)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the client gave up (timeout tests)

    def log_message(self, *args):
        pass


@pytest.fixture(autouse=True)
def _closed_circuits():
    circuit_reset()
    yield
    circuit_reset()


@pytest.fixture
def endpoint():
    server = FakeEndpoint()
    yield server
    server.close()


def client_for(endpoint: FakeEndpoint, **options) -> LLMClient:
    """A client of ``endpoint`` with short timeouts and backoff; ``options`` override."""
    defaults = {
        "base_url": endpoint.url,
        "api_key": "test",
        "timeout_s": 1.0,
        "retries": 2,
        "prices": {},
        "backoff_s": 0.05,
    }
    return LLMClient("test-model", **{**defaults, **options})


def closed_port_url() -> str:
    return f"http://127.0.0.1:{free_port()}/v1"


# --- chat, usage and cost -----------------------------------------------------------------------


def test_chat_returns_the_reply_with_the_endpoints_usage_and_its_cost(endpoint):
    endpoint.replies(Reply(body=completion("  Nine to eleven minutes.\n", usage=(1_000_000, 500_000))))
    client = client_for(endpoint, prices={"test-model": [0.15, 0.6]})
    reply = client.chat(QUESTION, max_tokens=50)
    assert isinstance(reply, Completion)
    assert reply.text == "Nine to eleven minutes."
    assert reply.model == "test-model"
    assert (reply.usage.llm_calls, reply.usage.tokens_in, reply.usage.tokens_out) == (1, 1_000_000, 500_000)
    assert reply.usage.cost_usd == pytest.approx(0.15 + 0.3)
    assert reply.ms > 0
    assert endpoint.requests[0]["max_tokens"] == 50
    assert endpoint.requests[0]["messages"] == QUESTION


def test_usage_is_counted_with_tiktoken_when_the_endpoint_reports_none(endpoint):
    endpoint.replies(Reply(body=completion("Boil the spaghetti for nine to eleven minutes.", usage=None)))
    reply = client_for(endpoint).chat(QUESTION)
    assert reply.usage.tokens_out == count_tokens("Boil the spaghetti for nine to eleven minutes.")
    assert reply.usage.tokens_in > count_tokens(QUESTION[0]["content"])


def test_a_model_without_a_price_costs_nothing(endpoint):
    reply = client_for(endpoint, prices={"gpt-4o": [2.5, 10.0]}).chat(QUESTION)
    assert reply.usage.tokens_in == 12
    assert reply.usage.cost_usd == 0.0


def test_an_empty_reply_raises_llm_empty_reply(endpoint):
    endpoint.replies(Reply(body=completion(" \n ")))
    with pytest.raises(LLMEmptyReply):
        client_for(endpoint).chat(QUESTION)
    assert len(endpoint.requests) == 1


# --- timeouts, retries, failures ------------------------------------------------------------------


def test_an_endpoint_slower_than_the_timeout_raises_llm_timeout(endpoint):
    endpoint.replies(Reply(body=completion(), delay=3))
    started = time.monotonic()
    with pytest.raises(LLMTimeout, match="did not answer within 0.5 s"):
        client_for(endpoint, timeout_s=0.5, retries=1).chat(QUESTION)
    assert len(endpoint.requests) == 1  # the timeout is the whole call's budget: no retry after it
    assert time.monotonic() - started < 1.5


def test_a_500_followed_by_a_200_is_retried_and_succeeds(endpoint):
    endpoint.replies(Reply(status=500, body={"error": {"message": "boom"}}), Reply(body=completion()))
    assert client_for(endpoint).chat(QUESTION).text == "Nine to eleven minutes."
    assert len(endpoint.requests) == 2


def test_an_endpoint_that_always_answers_503_fails_after_the_retries_in_bounded_time(endpoint):
    endpoint.replies(Reply(status=503, body={"error": {"message": "overloaded"}}))
    started = time.monotonic()
    with pytest.raises(LLMHTTPError, match="HTTP 503: overloaded") as caught:
        client_for(endpoint, retries=2).chat(QUESTION)
    assert caught.value.http_status == 503
    assert len(endpoint.requests) == 3
    assert time.monotonic() - started < 2


def test_a_429_is_retried_after_its_retry_after_delay(endpoint):
    endpoint.replies(
        Reply(status=429, body={"error": {"message": "slow down"}}, headers={"Retry-After": "1"}),
        Reply(body=completion()),
    )
    started = time.monotonic()
    assert client_for(endpoint).chat(QUESTION).text == "Nine to eleven minutes."
    assert time.monotonic() - started >= 0.95
    assert len(endpoint.requests) == 2


def test_a_client_error_other_than_429_is_not_retried(endpoint):
    endpoint.replies(Reply(status=400, body={"error": {"message": "bad request with key sk-abcdef123456789"}}))
    with pytest.raises(LLMHTTPError) as caught:
        client_for(endpoint).chat(QUESTION)
    assert caught.value.http_status == 400
    assert "sk-abcdef123456789" not in caught.value.message
    assert len(endpoint.requests) == 1


def test_a_closed_port_fails_fast_as_unavailable():
    client = LLMClient(
        "test-model", base_url=closed_port_url(), api_key="test", timeout_s=1.0, retries=2, backoff_s=0.05
    )
    started = time.monotonic()
    with pytest.raises(LLMUnavailable, match="Could not connect"):
        client.chat(QUESTION)
    assert time.monotonic() - started < 1


def test_the_circuit_opens_after_consecutive_failures_and_then_fails_without_a_request(endpoint, settings):
    settings.KB_LLM_CIRCUIT_FAILURES = 3
    settings.KB_LLM_CIRCUIT_COOLDOWN_S = 1
    endpoint.replies(Reply(status=503), Reply(status=503), Reply(status=503), Reply(body=completion()))
    client = client_for(endpoint, retries=0)
    for _ in range(3):
        with pytest.raises(LLMHTTPError):
            client.chat(QUESTION)
    started = time.monotonic()
    with pytest.raises(LLMUnavailable, match="keeps failing"):
        client_for(endpoint, retries=2).chat(QUESTION)  # another client of the same endpoint too
    assert time.monotonic() - started < 0.1
    assert len(endpoint.requests) == 3
    time.sleep(1.1)  # cooldown over: one trial request goes through and closes the circuit
    assert client.chat(QUESTION).text == "Nine to eleven minutes."
    assert client.chat(QUESTION).text == "Nine to eleven minutes."
    assert len(endpoint.requests) == 5


def test_a_failed_trial_reopens_the_circuit(endpoint, settings):
    settings.KB_LLM_CIRCUIT_FAILURES = 2
    settings.KB_LLM_CIRCUIT_COOLDOWN_S = 1
    endpoint.replies(Reply(status=500))
    client = client_for(endpoint, retries=0)
    for _ in range(2):
        with pytest.raises(LLMHTTPError):
            client.chat(QUESTION)
    time.sleep(1.1)
    with pytest.raises(LLMHTTPError):
        client.chat(QUESTION)  # the trial
    with pytest.raises(LLMUnavailable):
        client.chat(QUESTION)
    assert len(endpoint.requests) == 3


# --- concurrency ----------------------------------------------------------------------------------


def test_map_runs_at_most_concurrency_calls_at_once_and_keeps_the_order(endpoint):
    endpoint.script = lambda n, body: Reply(body=completion(f"echo {body['messages'][0]['content']}"), delay=0.3)
    client = client_for(endpoint, concurrency=4)
    started = time.monotonic()
    replies = client.map(lambda i: client.chat([{"role": "user", "content": str(i)}]).text, range(8))
    elapsed = time.monotonic() - started
    assert replies == [f"echo {i}" for i in range(8)]
    assert endpoint.max_in_flight == 4
    assert 0.55 < elapsed < 1.5  # two waves of 0.3 s, not eight


def test_map_puts_the_exception_of_a_failed_item_in_its_slot(endpoint):
    endpoint.script = lambda n, body: (
        Reply(body=completion("   ")) if body["messages"][0]["content"] == "1" else Reply(body=completion("fine"))
    )
    client = client_for(endpoint)
    results = client.map(lambda i: client.chat([{"role": "user", "content": str(i)}]).text, range(3))
    assert results[0] == "fine" and results[2] == "fine"
    assert isinstance(results[1], LLMEmptyReply)


# --- structured output and tool calls -------------------------------------------------------------


def test_structured_sends_the_schema_as_response_format_and_returns_the_validated_object(endpoint):
    endpoint.replies(Reply(body=completion('{"minutes": 10, "unit": "minutes"}')))
    value, reply = client_for(endpoint).structured(QUESTION, schema=MINUTES, name="boil time")
    assert value == {"minutes": 10, "unit": "minutes"}
    assert reply.usage.llm_calls == 1
    response_format = endpoint.requests[0]["response_format"]
    assert response_format["type"] == "json_schema"
    assert response_format["json_schema"] == {"name": "boil_time", "schema": MINUTES, "strict": True}


def test_structured_accepts_json_in_a_fenced_block(endpoint):
    endpoint.replies(Reply(body=completion('Here it is:\n```json\n{"minutes": 9, "unit": "minutes"}\n```')))
    value, _ = client_for(endpoint).structured(QUESTION, schema=MINUTES, name="boil_time")
    assert value == {"minutes": 9, "unit": "minutes"}


def test_structured_retries_malformed_output_once_and_then_raises_bad_output(endpoint):
    endpoint.replies(Reply(body=completion('{"minutes": ten')))
    with pytest.raises(LLMBadOutput, match="boil_time") as caught:
        client_for(endpoint).structured(QUESTION, schema=MINUTES, name="boil_time")
    assert len(endpoint.requests) == 2
    assert caught.value.usage.llm_calls == 2
    retry = endpoint.requests[1]["messages"]
    # Garbage is not shown back to the model (it would only copy it); the problem is named.
    assert retry[0] == QUESTION[0] and len(retry) == 2
    assert "not JSON" in retry[1]["content"]


def test_structured_succeeds_when_the_retried_reply_is_valid(endpoint):
    endpoint.replies(
        Reply(body=completion('{"minutes": "ten", "unit": "minutes"}')),
        Reply(body=completion('{"minutes": 10, "unit": "minutes"}')),
    )
    value, reply = client_for(endpoint).structured(QUESTION, schema=MINUTES, name="boil_time")
    assert value == {"minutes": 10, "unit": "minutes"}
    assert reply.usage.llm_calls == 2 and reply.usage.tokens_in == 24
    assert "minutes: 'ten' is not of type 'integer'" in endpoint.requests[1]["messages"][-1]["content"]


def llama_cpp_like(n, body):
    """An endpoint that takes only llama.cpp's ``json_object`` response format (its 422 comes as a 500)."""
    if body["response_format"]["type"] != "json_object":
        message = "1 validation error:\n  {'loc': ('body', 'response_format', 'type'), 'msg': 'Input should be 'text''}"
        return Reply(status=500, body={"error": {"message": message, "type": "internal_server_error"}})
    return Reply(body=completion('{"minutes": 11, "unit": "minutes"}'))


def test_structured_falls_back_to_llama_cpps_response_format_without_retrying_and_remembers_it(endpoint):
    endpoint.script = llama_cpp_like
    client = client_for(endpoint)
    assert client.structured(QUESTION, schema=MINUTES, name="boil_time")[0]["minutes"] == 11
    assert client.structured(QUESTION, schema=MINUTES, name="boil_time")[0]["minutes"] == 11
    assert [r["response_format"]["type"] for r in endpoint.requests] == ["json_schema", "json_object", "json_object"]
    assert endpoint.requests[1]["response_format"]["schema"] == MINUTES


def test_a_schema_the_endpoint_carries_stays_out_of_the_prompt_when_the_caller_asks(endpoint):
    endpoint.script = llama_cpp_like
    client = client_for(endpoint)
    client.structured(QUESTION, schema=MINUTES, name="boil_time", schema_in_prompt=False)
    client.structured(QUESTION, schema=MINUTES, name="boil_time")
    carried, spelled_out = endpoint.requests[-2:]
    assert carried["response_format"]["schema"] == MINUTES == spelled_out["response_format"]["schema"]
    assert "JSON schema" not in carried["messages"][-1]["content"]
    assert "JSON schema" in spelled_out["messages"][-1]["content"]


def test_tool_call_forces_the_function_and_returns_its_validated_arguments(endpoint):
    endpoint.replies(Reply(body=completion(arguments='{"minutes": 10, "unit": "minutes"}')))
    arguments, reply = client_for(endpoint).tool_call(
        QUESTION, name="record", description="Record the boiling time.", parameters=MINUTES
    )
    assert arguments == {"minutes": 10, "unit": "minutes"}
    assert reply.text == '{"minutes": 10, "unit": "minutes"}'
    request = endpoint.requests[0]
    assert request["tool_choice"] == {"type": "function", "function": {"name": "record"}}
    assert request["tools"][0]["function"]["parameters"] == MINUTES


def test_tool_call_reads_the_arguments_from_the_content_when_the_endpoint_replies_with_text(endpoint):
    endpoint.replies(Reply(body=completion('```json\n{"minutes": 8, "unit": "minutes"}\n```')))
    arguments, _ = client_for(endpoint).tool_call(
        QUESTION, name="record", description="Record the boiling time.", parameters=MINUTES
    )
    assert arguments == {"minutes": 8, "unit": "minutes"}


def test_tool_call_arguments_that_break_the_schema_twice_raise_bad_output(endpoint):
    endpoint.replies(Reply(body=completion(arguments='{"minutes": 10}')), Reply(body=completion('{"minutes": 10}')))
    with pytest.raises(LLMBadOutput, match="'unit' is a required property"):
        client_for(endpoint).tool_call(QUESTION, name="record", description="Record.", parameters=MINUTES)
    assert len(endpoint.requests) == 2
    # the retry asks through a response format, with the invalid arguments shown back
    assert "tools" not in endpoint.requests[1] and "response_format" in endpoint.requests[1]
    assert {"role": "assistant", "content": '{"minutes": 10}'} in endpoint.requests[1]["messages"]


def test_structured_without_retry_raises_at_once_carrying_the_broken_reply(endpoint):
    endpoint.replies(Reply(body=completion('{"minutes": 10, "unit": "min')))
    with pytest.raises(LLMBadOutput) as raised:
        client_for(endpoint).structured(QUESTION, schema=MINUTES, name="boil_time", retry=False)
    assert raised.value.reply == '{"minutes": 10, "unit": "min' and len(endpoint.requests) == 1


def test_an_invalid_schema_is_a_programming_error_raised_before_any_request(endpoint):
    with pytest.raises(ValueError, match="Invalid JSON schema"):
        client_for(endpoint).structured(QUESTION, schema={"type": "thing"}, name="x")
    assert endpoint.requests == []


# --- streaming ------------------------------------------------------------------------------------


def test_stream_yields_the_deltas_and_then_the_reported_usage(endpoint):
    endpoint.replies(Reply(events=[chunk("Nine "), chunk("to eleven"), chunk(" minutes."), chunk(usage=(20, 5))]))
    client = client_for(endpoint, prices={"test-model": [1.0, 2.0]})
    assert list(client.stream(QUESTION)) == ["Nine ", "to eleven", " minutes."]
    assert endpoint.requests[0]["stream_options"] == {"include_usage": True}
    usage = client.last_stream_usage
    assert (usage.llm_calls, usage.tokens_in, usage.tokens_out) == (1, 20, 5)
    assert usage.cost_usd == pytest.approx(30 / 1_000_000)


def test_stream_usage_is_counted_with_tiktoken_when_the_endpoint_sends_none(endpoint):
    endpoint.replies(Reply(events=[chunk("Nine to eleven"), chunk(" minutes.")]))
    client = client_for(endpoint)
    assert "".join(client.stream(QUESTION)) == "Nine to eleven minutes."
    assert client.last_stream_usage.tokens_out == count_tokens("Nine to eleven minutes.")


def test_a_stream_with_a_schema_asks_for_json_in_the_form_the_endpoint_accepts_and_yields_its_text(endpoint):
    def llama_cpp_like(n, body):
        if body["response_format"]["type"] != "json_object":  # llama-cpp-python sends its 422 as a 500
            message = (
                "1 validation error:\n  {'loc': ('body', 'response_format', 'type'), 'msg': 'Input should be 'text''}"
            )
            return Reply(status=500, body={"error": {"message": message, "type": "internal_server_error"}})
        return Reply(events=[chunk('{"minutes": '), chunk('11, "unit": "minutes"}'), chunk(usage=(30, 9))])

    endpoint.script = llama_cpp_like
    client = client_for(endpoint)
    assert "".join(client.stream(QUESTION, schema=MINUTES, name="boil_time")) == '{"minutes": 11, "unit": "minutes"}'
    assert "".join(client.stream(QUESTION, schema=MINUTES, name="boil_time")).startswith('{"minutes"')
    kinds = [r["response_format"]["type"] for r in endpoint.requests]
    assert kinds == ["json_schema", "json_schema", "json_object", "json_object"]  # with, then without usage
    assert endpoint.requests[2]["response_format"]["schema"] == MINUTES and endpoint.requests[2]["stream"] is True
    assert "JSON schema" in endpoint.requests[2]["messages"][-1]["content"]
    assert endpoint.requests[3]["stream_options"] == {"include_usage": True}  # usage was never the problem
    assert client.last_stream_usage.tokens_out == 9


# --- configuration ----------------------------------------------------------


def test_no_configured_model_means_no_client(settings):
    settings.KB_LLM_MODEL = ""
    assert configured_llm() is None


def test_the_configured_client_is_built_once_per_model_and_endpoint(settings, endpoint):
    settings.KB_LLM_MODEL = "test-model"
    settings.OPENAI_BASE_URL = endpoint.url
    client = configured_llm()
    assert client is configured_llm()
    assert (client.model, client.base_url) == ("test-model", endpoint.url)
    settings.KB_LLM_MODEL = "other-model"
    assert configured_llm() is not client


def test_a_client_is_named_after_its_model(endpoint):
    assert client_for(endpoint).name == "test-model"


# --- the real local LLM ---------------------------------------------------------------------------


def test_the_real_local_llm_fills_a_json_schema_and_calls_a_forced_function(local_llm_url):
    from llm.local import MODEL_ALIAS

    client = LLMClient(MODEL_ALIAS, base_url=local_llm_url, api_key="local", timeout_s=600, retries=0)
    colour = {
        "type": "object",
        "properties": {"colour": {"type": "string", "enum": ["red", "green", "blue"]}, "sure": {"type": "boolean"}},
        "required": ["colour", "sure"],
        "additionalProperties": False,
    }
    messages = [{"role": "user", "content": "The sky is blue. What colour is the sky?"}]
    value, reply = client.structured(messages, schema=colour, name="sky_colour", max_tokens=64)
    assert value["colour"] in {"red", "green", "blue"} and isinstance(value["sure"], bool)
    assert reply.model and reply.usage.tokens_in > 0 and reply.usage.cost_usd == 0.0

    minutes = {"type": "object", "properties": {"minutes": {"type": "integer"}}, "required": ["minutes"]}
    arguments, call = client.tool_call(
        [{"role": "user", "content": "Spaghetti boils for ten minutes. Record the boiling time."}],
        name="record_boiling_time",
        description="Record how many minutes pasta boils.",
        parameters=minutes,
        max_tokens=32,
    )
    assert isinstance(arguments["minutes"], int)
    assert call.usage.llm_calls >= 1 and call.usage.tokens_out > 0


# --- a pipeline on a misbehaving endpoint -------------------------------------------------------


def test_an_answer_pipeline_on_a_hung_endpoint_degrades_within_the_timeout_budget(corpus, endpoint):
    from retrieval.pipeline import pipeline_answer
    from retrieval.request import AnswerRequest

    endpoint.replies(Reply(body=completion(), delay=5))
    started = time.monotonic()
    run = pipeline_answer(
        AnswerRequest(question="How long do I boil spaghetti?", pipeline="advanced"),
        tenant=corpus,
        llm=client_for(endpoint),
    )
    # The rephrase call is cut at the client's 1.0 s budget, and the run never waits for the 5 s
    # reply; the LLM-free stages' own time varies with what else the cores run (xdist).
    rephrase = next(step for step in run.steps if step.stage == "rephrase")
    assert rephrase.ms < (1.0 + 0.5) * 1000
    assert time.monotonic() - started < 1.0 + 3.5
    assert len(endpoint.requests) == 1  # rephrase timed out; expand and generate did not call again
    assert run.degraded and "rephrase" in run.degraded_reason
    assert run.answer.mode == "extractive" and run.answer.citations


@pytest.mark.parametrize(
    "reply",
    [
        Reply(status=500, body={"error": {"message": "boom"}}),
        Reply(body="this is not json at all"),
        Reply(body=completion(" ")),
    ],
    ids=["5xx", "malformed-body", "empty-reply"],
)
def test_an_answer_pipeline_answers_extractively_whatever_the_endpoint_does(corpus, endpoint, reply):
    from retrieval.pipeline import pipeline_answer
    from retrieval.request import AnswerRequest

    endpoint.replies(reply)
    run = pipeline_answer(
        AnswerRequest(question="How long do I boil spaghetti?"), tenant=corpus, llm=client_for(endpoint)
    )
    assert run.degraded and run.steps[-1].error
    assert run.answer.mode == "extractive" and "LLM could not answer" in run.answer.text
    assert run.answer.citations[0].as_dict()["document"] == "recipes/pasta"
