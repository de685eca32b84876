"""The portal's streaming endpoint (POST /ask/stream/), which the ask page's script reads.

The run happens in a worker thread with its own database connection: ``transactional_db``.
"""

import json
import re

import pytest
from django.test import Client
from django.urls import reverse

from tests.factories import UserFactory

STREAM = reverse("portal:ask-stream")
ASK = reverse("portal:ask")

pytestmark = pytest.mark.usefixtures("transactional_db")


def sse_events(response) -> list[tuple[str, dict]]:
    body = b"".join(response.streaming_content).decode()
    events = []
    for frame in body.split("\n\n"):
        lines = [line for line in frame.split("\n") if line and not line.startswith(":")]
        if lines:
            fields = dict(line.split(": ", 1) for line in lines)
            events.append((fields["event"], json.loads(fields["data"])))
    return events


@pytest.fixture(autouse=True)
def no_llm(monkeypatch):
    monkeypatch.setattr("retrieval.pipeline.configured_llm", lambda: None)


def test_the_final_event_carries_the_answer_rendered_as_the_page_renders_it(client, corpus, member):
    client.force_login(member)
    question = {"question": "how long do I boil spaghetti?", "pipeline": "simple"}
    response = client.post(STREAM, question)
    assert response.status_code == 200 and response["Content-Type"] == "text/event-stream"
    events = sse_events(response)
    kinds = [event for event, _ in events]
    assert kinds[0] == "step" and kinds[-1] == "answer"
    answer = events[-1][1]
    links = re.findall(r'<a class="cite" href="([^"]+)">\[(\d+)\]</a>', answer["html"])
    assert links and answer["pipeline"] == "simple"

    page = client.post(ASK, question).content.decode()
    answer_card = re.compile(r'<section class="card">.*?</section>', re.S)
    # Each run has its own trace, timings, conversation and CSRF token.
    run_specific = re.compile(
        r'/answers/\d+/|#\d+|[\d.]+ ms|name="(?:trace|csrfmiddlewaretoken)" value="[^"]+"|comment-\d+|feedback-\d+'
    )
    streamed, rendered = answer_card.search(answer["html"]).group(0), answer_card.search(page).group(0)
    assert run_specific.sub("", streamed.strip()) == run_specific.sub("", rendered.strip())


def test_the_streaming_endpoint_requires_the_csrf_token(corpus, member):
    client = Client(enforce_csrf_checks=True)
    client.force_login(member)
    assert client.post(STREAM, {"question": "spaghetti?"}).status_code == 403
    token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', client.get(ASK).content.decode()).group(1)
    response = client.post(STREAM, {"question": "spaghetti?"}, headers={"X-CSRFToken": token})
    assert response.status_code == 200
    assert sse_events(response)[-1][0] == "answer"


def test_an_invalid_question_is_a_json_400_naming_the_field(client, corpus, member):
    client.force_login(member)
    response = client.post(STREAM, {"question": "   ", "pipeline": "magic"})
    assert response.status_code == 400 and not response.streaming
    error = response.json()["error"]
    assert error["code"] == "invalid_input" and set(error["message"]) == {"question", "pipeline"}


def test_the_streaming_endpoint_wants_a_signed_in_member_and_a_post(client, corpus, member):
    assert client.post(STREAM, {"question": "spaghetti?"}).status_code == 302  # to the login page
    client.force_login(UserFactory())
    assert client.post(STREAM, {"question": "spaghetti?"}).status_code == 403  # no tenant
    client.force_login(member)
    assert client.get(STREAM).status_code == 405
