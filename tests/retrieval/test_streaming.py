"""The answer event stream as a service (``retrieval.streaming.answer_events``), alone.

Its runs happen in a worker thread with its own database connection: ``transactional_db``.
"""

import json
import threading

import pytest

from retrieval.request import AnswerRequest
from retrieval.streaming import answer_events, sse_frame
from tests.retrieval.doubles import ScriptedLLM

pytestmark = pytest.mark.usefixtures("transactional_db")


class GatedLLM(ScriptedLLM):
    """A scripted LLM whose stream waits for ``release`` before each word, counting words sent."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.release = threading.Event()
        self.sent = 0

    def stream(self, messages, *, max_tokens=512, **options):
        for piece in super().stream(messages, max_tokens=max_tokens, **options):
            self.release.wait(5)
            self.sent += 1
            yield piece


def parsed(frame: str) -> tuple[str, dict]:
    event, data = frame.rstrip("\n").split("\n")
    return event.removeprefix("event: "), json.loads(data.removeprefix("data: "))


def test_a_frame_is_one_event_line_and_one_data_line_even_for_multiline_text():
    frame = sse_frame("token", {"text": "line one\nline two"})
    assert frame == 'event: token\ndata: {"text":"line one\\nline two"}\n\n'
    assert parsed(frame) == ("token", {"text": "line one\nline two"})


def test_the_stream_is_the_runs_steps_then_tokens_then_the_presented_answer(corpus, written_style):
    llm = ScriptedLLM(chat_reply="Patch the inner tube [1].")
    frames = list(
        answer_events(
            AnswerRequest(question="flat tyre?"),
            tenant=corpus,
            user=None,
            present=lambda a: {"text": a["answer"]},
            llm=llm,
        )
    )
    events = [parsed(frame) for frame in frames]
    assert [e for e, _ in events if e != "token"] == ["step"] * 5 + ["answer"]  # scope, retrieve, fuse, pack, generate
    assert "".join(d["text"] for e, d in events if e == "token").strip() == "Patch the inner tube [1]."
    assert events[-1] == ("answer", {"text": "Patch the inner tube [1]."})


def test_a_quoted_answer_streams_its_short_answer_then_the_quoted_explanation(corpus):
    llm = ScriptedLLM(chat_reply="Patch the inner tube [1]")
    frames = list(
        answer_events(
            AnswerRequest(question="flat tyre?"),
            tenant=corpus,
            user=None,
            present=lambda a: {"text": a["answer"]},
            llm=llm,
        )
    )
    events = [parsed(frame) for frame in frames]
    assert [e for e, _ in events] == ["step"] * 4 + ["short_answer", "token", "step", "answer"]
    assert events[4] == ("short_answer", {"text": "Patch the inner tube"})
    assert events[5][1]["text"] == events[-1][1]["text"] and "[1]" in events[-1][1]["text"]


def test_bad_options_become_an_error_event_not_an_exception(corpus):
    frames = list(answer_events(AnswerRequest(question="flat tyre?", k=99), tenant=corpus, user=None, llm=None))
    assert [parsed(frame) for frame in frames] == [
        ("error", {"error": {"code": "invalid_input", "message": "k must be between 1 and 20."}})
    ]


def test_a_silent_run_sends_keep_alive_comments(corpus):
    llm = GatedLLM(chat_reply="Patch it [1].")
    events = answer_events(AnswerRequest(question="flat tyre?"), tenant=corpus, user=None, llm=llm, keepalive_s=0.05)
    frames = []
    for frame in events:
        frames.append(frame)
        if frame == ": keep-alive\n\n":
            llm.release.set()
    assert ": keep-alive\n\n" in frames
    assert parsed(frames[-1])[0] == "answer"


def test_closing_the_stream_early_stops_the_run(corpus):
    from retrieval.models import Trace

    llm = GatedLLM(chat_reply="one two three four five six seven eight [1].")
    events = answer_events(AnswerRequest(question="flat tyre?"), tenant=corpus, user=None, llm=llm)
    assert parsed(next(events))[0] == "step"  # the run started
    workers = [t for t in threading.enumerate() if t.name == "answer-events"]
    events.close()  # the client went away
    llm.release.set()
    for worker in workers:
        worker.join(10)
    assert workers and not any(worker.is_alive() for worker in workers)
    assert llm.sent <= 1  # stopped at its next event, not after streaming all eight words
    assert not Trace.objects.filter(tenant=corpus).exists()  # an abandoned run records no answer


def test_the_real_local_llm_streams_its_answer_as_token_events(corpus, written_style, local_llm_url):
    from llm import LLMClient
    from llm.local import MODEL_ALIAS
    from retrieval.models import Trace

    class ShortLLM(LLMClient):
        def stream(self, messages, *, max_tokens=512, **options):
            return super().stream(messages, max_tokens=96, **options)  # the tiny model rambles: plumbing only

    llm = ShortLLM(MODEL_ALIAS, base_url=local_llm_url, api_key="local")
    question = "How long should spaghetti cook?"
    frames = list(
        answer_events(AnswerRequest(question=question, k=1, strategy="top_n"), tenant=corpus, user=None, llm=llm)
    )
    events = [parsed(frame) for frame in frames if not frame.startswith(":")]
    kinds = [event for event, _ in events]
    assert kinds[-1] == "answer" and kinds.count("token") > 1, kinds
    answer = events[-1][1]
    assert answer["mode"] == "llm" and answer["degraded"] is False
    streamed = "".join(data["text"] for event, data in events if event == "token")
    assert streamed.strip()
    generate = Trace.objects.get(pk=answer["trace_id"]).steps.get(stage="generate")
    assert generate.summary["reply"] == answer["answer"]  # the trace records the streamed answer
    assert generate.tokens_out > 0
    assert all(c["n"] == 1 for c in answer["citations"])  # whatever it says, only the one passage is cited
