"""POST /api/v1/ask/stream/: an answer run as Server-Sent Events.

The run happens in a worker thread with its own database connection, which cannot see a test
transaction's rows: these tests use ``transactional_db``.
"""

import json

import pytest

from core.errors import UpstreamError
from knowledge.models import Chunk
from tests.retrieval.doubles import ScriptedLLM

STREAM = "/api/v1/ask/stream/"

pytestmark = pytest.mark.usefixtures("transactional_db")


def sse_events(response) -> list[tuple[str, dict]]:
    """The (event, data) pairs of a streamed response, in order; keep-alive comments skipped."""
    body = b"".join(response.streaming_content).decode()
    assert body.endswith("\n\n"), body[-200:]
    events = []
    for frame in body.split("\n\n"):
        lines = [line for line in frame.split("\n") if line and not line.startswith(":")]
        if not lines:
            continue
        fields = dict(line.split(": ", 1) for line in lines)
        events.append((fields["event"], json.loads(fields["data"])))
    return events


@pytest.fixture
def no_llm(monkeypatch):
    monkeypatch.setattr("retrieval.pipeline.configured_llm", lambda: None)


@pytest.mark.parametrize("pipeline", ["simple", "expand"])
def test_a_streamed_answer_sends_its_steps_then_the_same_answer_as_the_ask_endpoint(
    pipeline, corpus, member_client, no_llm
):
    question = {"question": "How long should spaghetti cook?", "pipeline": pipeline}
    response = member_client.post(STREAM, question, format="json", HTTP_ACCEPT="text/event-stream")
    assert response.status_code == 200
    assert response.streaming
    assert response["Content-Type"] == "text/event-stream"
    assert response["Cache-Control"] == "no-cache" and response["X-Accel-Buffering"] == "no"
    events = sse_events(response)
    kinds = [event for event, _ in events]
    assert kinds[-1] == "answer" and kinds.count("answer") == 1
    assert "step" in kinds[: kinds.index("answer")]
    assert "token" not in kinds  # an extractive answer has no streamed text
    stages = [data["stage"] for event, data in events if event == "step"]
    assert stages[-4:] == ["retrieve", "fuse", "pack", "generate"]
    if pipeline == "expand":
        expand = next(data for event, data in events if event == "step" and data["stage"] == "expand")
        assert expand["summary"]  # RM3's terms, compacted
    retrieve = next(data for event, data in events if event == "step" and data["stage"] == "retrieve")
    assert retrieve["summary"]["counts"]["lexical"] >= 1 and retrieve["ms"] >= 0

    answer = events[-1][1]
    plain = member_client.post("/api/v1/ask/", question, format="json").json()
    assert set(answer) == set(plain)
    assert answer["pipeline"] == pipeline and answer["degraded"] is False
    assert answer["citations"][0]["document"] == "recipes/pasta"
    assert answer["answer"] == plain["answer"]
    assert [s["stage"] for s in answer["steps"]] == stages
    assert answer["trace_id"] is not None


def test_an_llm_answer_streams_its_text_as_token_events(corpus, member_client, monkeypatch, written_style):
    llm = ScriptedLLM(chat_reply="Cook the spaghetti for nine to eleven minutes [1].")
    monkeypatch.setattr("retrieval.pipeline.configured_llm", lambda: llm)
    response = member_client.post(STREAM, {"question": "How long should spaghetti cook?"}, format="json")
    events = sse_events(response)
    kinds = [event for event, _ in events]
    tokens = [data["text"] for event, data in events if event == "token"]
    assert len(tokens) > 1
    assert kinds.index("step") < kinds.index("token") < kinds.index("answer") == len(kinds) - 1
    answer = events[-1][1]
    assert "".join(tokens).strip() == answer["answer"] == "Cook the spaghetti for nine to eleven minutes [1]."
    assert answer["mode"] == "llm" and [c["n"] for c in answer["citations"]] == [1]
    assert answer["usage"]["llm_calls"] == 1
    generate = next(data for event, data in events if event == "step" and data["stage"] == "generate")
    assert generate["summary"]["mode"] == "llm" and generate["summary"]["reply"] == answer["answer"]


@pytest.mark.parametrize(
    "payload",
    [{}, {"question": ""}, {"question": "pasta", "k": 0}, {"question": "pasta", "pipeline": "magic"}],
)
def test_bad_input_is_a_plain_json_400_before_any_event(payload, corpus, member_client):
    response = member_client.post(STREAM, payload, format="json", HTTP_ACCEPT="text/event-stream")
    assert response.status_code == 400
    assert not response.streaming
    assert response["Content-Type"] == "application/json"
    assert response.json()["error"]["code"] == "invalid_input"


def test_an_unknown_source_is_a_400_and_no_token_a_401(corpus, member_client, client):
    response = member_client.post(STREAM, {"question": "pasta", "sources": ["nope"]}, format="json")
    assert response.status_code == 400 and response.json()["error"]["code"] == "unknown_source"
    assert client.post(STREAM, {"question": "pasta"}).status_code == 401


@pytest.mark.parametrize(
    ("failure", "code"),
    [(RuntimeError("database on fire"), "internal_error"), (UpstreamError("embedder down"), "upstream_error")],
)
def test_an_exception_inside_the_pipeline_becomes_an_error_event(failure, code, corpus, member_client, monkeypatch):
    def broken(*args, **kwargs):
        raise failure

    monkeypatch.setattr("retrieval.stages.retrieve.candidates.candidates_retrieve", broken)
    response = member_client.post(STREAM, {"question": "How long should spaghetti cook?"}, format="json")
    assert response.status_code == 200
    events = sse_events(response)
    assert [event for event, _ in events][-1] == "error"
    assert "answer" not in [event for event, _ in events]
    error = events[-1][1]["error"]
    assert error["code"] == code
    assert "database on fire" not in error["message"]  # internal details stay in the log


def test_another_tenants_documents_never_reach_the_stream(corpus, other_tenant_corpus, member_client, no_llm):
    secret_chunks = set(Chunk.objects.for_tenant(other_tenant_corpus).values_list("pk", flat=True))
    assert secret_chunks
    response = member_client.post(STREAM, {"question": "how do I patch a bicycle inner tube?"}, format="json")
    events = sse_events(response)
    retrieve = next(data for event, data in events if event == "step" and data["stage"] == "retrieve")
    candidates = {item[0] for ranked in retrieve["summary"]["candidates"].values() for item in ranked}
    assert candidates and not candidates & secret_chunks
    answer = events[-1][1]
    assert [c["document"] for c in answer["citations"]][0] == "howto/bike-tyre"
    assert all(c["chunk_id"] not in secret_chunks for c in answer["citations"])
    assert "secret" not in json.dumps(events).lower()


@pytest.mark.parametrize("pipeline", ["superrag", "walkingrag", "adaptive"])
def test_the_seed_pipelines_stream_their_steps_before_the_answer(pipeline, corpus, member_client, no_llm):
    question = {"question": "How long should spaghetti cook?", "pipeline": pipeline}
    response = member_client.post(STREAM, question, format="json", HTTP_ACCEPT="text/event-stream")
    events = sse_events(response)
    kinds = [event for event, _ in events]
    assert kinds[-1] == "answer" and "step" in kinds[: kinds.index("answer")]
    answer = events[-1][1]
    assert answer["pipeline"] == pipeline and answer["citations"]
    assert [s["stage"] for s in answer["steps"]] == [data["stage"] for event, data in events if event == "step"]


def test_a_json_answer_streams_its_short_answer_then_the_explanation_text_never_raw_json(
    corpus,
    member_client,
    monkeypatch,
    written_style,
):
    reply = {
        "short_answer": "Nine to eleven minutes",
        "answer": 'Cook the spaghetti for nine to eleven minutes [1].\nStir it so it does not "stick". Paris is in France.',
    }
    monkeypatch.setattr("retrieval.pipeline.configured_llm", lambda: ScriptedLLM(answer_reply=reply))
    response = member_client.post(STREAM, {"question": "How long should spaghetti cook?"}, format="json")
    events = sse_events(response)
    kinds = [event for event, _ in events]
    assert kinds.count("short_answer") == 1 and kinds.index("short_answer") < kinds.index("token")
    assert events[kinds.index("short_answer")][1] == {"text": "Nine to eleven minutes"}
    streamed = "".join(data["text"] for event, data in events if event == "token")
    assert streamed == reply["answer"]  # decoded from the JSON string as it came
    answer = events[-1][1]
    assert answer["short_answer"] == "Nine to eleven minutes"
    assert [s["supported"] for s in answer["sentences"]] == [True, True, False]
    assert answer["unsupported"] == ["Paris is in France."]
    assert answer["citation_coverage"] == pytest.approx(2 / 3, abs=1e-4)
    plain = member_client.post("/api/v1/ask/", {"question": "How long should spaghetti cook?"}, format="json").json()
    assert {key: plain[key] for key in ("short_answer", "answer", "sentences", "citation_coverage", "unsupported")} == {
        key: answer[key] for key in ("short_answer", "answer", "sentences", "citation_coverage", "unsupported")
    }
