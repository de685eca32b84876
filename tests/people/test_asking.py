"""Every way of asking goes through ``people.asking``: the REST ask and its stream, the portal's ask
page and its stream, and ``manage.py ask`` answer and keep a question the same way.

The streams run in a worker thread with its own database connection: ``transactional_db``.
"""

import io
import json

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.test import Client
from django.urls import reverse

from core.errors import InvalidInput, PermissionDenied
from people.asking import ask, ask_stream
from people.models import Conversation
from retrieval.models import Trace
from retrieval.request import AnswerRequest
from tests.api.conftest import client_for

pytestmark = pytest.mark.usefixtures("transactional_db")

QUESTION = "How long should spaghetti cook?"


@pytest.fixture(autouse=True)
def no_llm(monkeypatch):
    monkeypatch.setattr("retrieval.pipeline.configured_llm", lambda: None)


def sse_answer(response) -> dict:
    """The data of the ``answer`` event of a streamed response."""
    body = b"".join(response.streaming_content).decode()
    for frame in body.split("\n\n"):
        fields = dict(line.split(": ", 1) for line in frame.split("\n") if line and not line.startswith(":"))
        if fields.get("event") == "answer":
            return json.loads(fields["data"])
    raise AssertionError(f"no answer event in {body[:500]!r}")


def turn_kept(conversation_id: int) -> dict:
    """What a conversation's only turn holds, but its trace id, plus who the trace records."""
    turn = Conversation.objects.get(pk=conversation_id).turns.get()
    return {
        "question": turn.question,
        "query": turn.query,
        "answer": turn.answer,
        "citations": turn.citations,
        "pipeline": turn.pipeline,
        "order": turn.order,
        "trace_user": Trace.objects.get(pk=turn.trace_id).user_id,
    }


def test_the_rest_api_its_stream_the_portal_its_stream_and_the_cli_keep_the_same_turn(corpus, member):
    api = client_for(member)
    portal = Client()
    portal.force_login(member)
    cli = io.StringIO()
    call_command("ask", QUESTION, "--tenant", corpus.slug, "--user", member.username, "--json", stdout=cli)
    answers = {
        "rest": api.post(reverse("api:ask"), {"question": QUESTION}, format="json").json(),
        "rest stream": sse_answer(api.post(reverse("api:ask-stream"), {"question": QUESTION}, format="json")),
        "portal stream": sse_answer(
            portal.post(reverse("portal:ask-stream"), {"question": QUESTION, "personalize": "on"})
        ),
        "cli": json.loads(cli.getvalue()),
    }
    page = portal.post(reverse("portal:ask"), {"question": QUESTION, "personalize": "on"})
    assert page.status_code == 200
    conversations = {path: answer["conversation_id"] for path, answer in answers.items()}
    conversations["portal"] = page.context["answer"]["conversation_id"]
    assert len(set(conversations.values())) == 5 == Conversation.objects.filter(user=member).count()
    kept = {path: turn_kept(conversation_id) for path, conversation_id in conversations.items()}
    assert (
        kept["rest"]["question"] == QUESTION and kept["rest"]["citations"] and kept["rest"]["trace_user"] == member.pk
    )
    assert all(turn == kept["rest"] for turn in kept.values()), kept
    assert {answer["turn"] for answer in answers.values()} == {1}


def test_a_conversation_begun_in_the_api_continues_from_the_cli(corpus, member):
    first = client_for(member).post(reverse("api:ask"), {"question": QUESTION}, format="json").json()
    out = io.StringIO()
    call_command(
        "ask",
        "And which sauce goes with it?",
        "--tenant",
        corpus.slug,
        "--user",
        member.username,
        "--conversation",
        str(first["conversation_id"]),
        "--json",
        stdout=out,
    )
    follow_up = json.loads(out.getvalue())
    assert (follow_up["conversation_id"], follow_up["turn"]) == (first["conversation_id"], 2)
    turns = Conversation.objects.get(pk=first["conversation_id"]).turns.order_by("order")
    assert [t.question for t in turns] == [QUESTION, "And which sauce goes with it?"]


def test_asking_without_a_user_answers_but_keeps_no_conversation(corpus):
    out = io.StringIO()
    call_command("ask", QUESTION, "--tenant", corpus.slug, "--json", stdout=out)
    answer = json.loads(out.getvalue())
    assert answer["citations"] and "conversation_id" not in answer
    assert not Conversation.objects.exists()
    with pytest.raises(CommandError, match="--conversation needs --user"):
        call_command("ask", "Which sauce?", "--tenant", corpus.slug, "--conversation", "1", stdout=io.StringIO())
    with pytest.raises(PermissionDenied):
        ask(AnswerRequest(question="Which sauce?", conversation_id=1), tenant=corpus, user=None)


def test_an_unknown_source_is_refused_before_anything_is_asked_or_streamed(corpus, member):
    with pytest.raises(InvalidInput) as refused:
        ask(
            AnswerRequest.for_sources(tenant=corpus, user=member, sources=["nope"], question=QUESTION),
            tenant=corpus,
            user=member,
        )
    assert refused.value.code == "unknown_source"
    with pytest.raises(InvalidInput):
        ask_stream(
            AnswerRequest.for_sources(tenant=corpus, user=member, sources=["nope"], question=QUESTION),
            tenant=corpus,
            user=member,
        )
    assert not Conversation.objects.exists() and not Trace.objects.exists()


def test_a_question_asked_while_a_source_syncs_is_answered_and_names_that_source(corpus, member, source):
    from knowledge.models import SyncRun

    wiki = source.__class__.objects.create(tenant=corpus, name="wiki", kind="folder", location="/srv/wiki")
    SyncRun.objects.create(tenant=corpus, source=wiki, status=SyncRun.Status.RUNNING)

    answer = client_for(member).post(reverse("api:ask"), {"question": QUESTION}, format="json").json()
    client = Client()
    client.force_login(member)
    page = client.post(reverse("portal:ask"), {"question": QUESTION}).content.decode()

    assert answer["citations"] and answer["syncing"] == ["wiki"]
    assert "Answered from what is in so far: wiki is still syncing" in page
    SyncRun.objects.filter(source=wiki).update(status=SyncRun.Status.DONE)
    assert ask(AnswerRequest(question=QUESTION), tenant=corpus, user=None).syncing == []
