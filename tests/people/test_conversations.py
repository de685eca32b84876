"""Conversations: follow-ups condensed into standalone queries, turns kept as history, API and portal."""

import pytest
from django.urls import reverse

from core.errors import NotFound
from llm import LLMClient
from people.conversations import conversation_ask
from people.models import Conversation, Turn
from retrieval.models import Trace
from retrieval.request import AnswerRequest
from retrieval.stages.rewrite.condense import carried_terms
from tests.api.conftest import client_for
from tests.factories import MembershipFactory
from tests.retrieval.doubles import ScriptedLLM

FIRST = "How do I fix a flat bicycle tyre?"
FOLLOW_UP = "Which glue do I need for that?"


def test_carried_terms_are_the_earlier_questions_key_words_the_follow_up_lacks(db):
    assert carried_terms("And how do I undo it?", ["How do I squash the migrations?"]) == ["squash", "migrations"]


def test_carried_terms_skip_words_the_follow_up_already_has_by_their_stem(db):
    assert carried_terms("Which tyres need patches?", ["How do I patch a bicycle tyre?"]) == ["bicycle"]


def test_a_first_question_starts_a_conversation_and_keeps_the_turn(corpus, member):
    run = conversation_ask(AnswerRequest(question=FIRST), tenant=corpus, user=member)
    conversation = Conversation.objects.get(pk=run.conversation_id)
    assert (conversation.title, conversation.user, run.turn) == (FIRST, member, 1)
    turn = conversation.turns.get()
    assert (turn.question, turn.query, turn.answer) == (FIRST, FIRST, run.answer.text)
    assert turn.citations[0]["title"] == "Fixing a flat bicycle tyre"
    assert turn.trace_id == run.trace_id


def test_a_follow_up_without_an_llm_carries_the_earlier_key_terms_and_finds_the_right_document(corpus, member):
    first = conversation_ask(AnswerRequest(question=FIRST), tenant=corpus, user=member)
    follow_up = conversation_ask(
        AnswerRequest(question=FOLLOW_UP, conversation_id=first.conversation_id), tenant=corpus, user=member
    )

    condense = next(step for step in follow_up.steps if step.stage == "condense")
    assert condense.summary["by"] == "key terms"
    assert {"flat", "bicycle", "tyre"} <= set(condense.summary["carried_terms"])
    assert follow_up.answer.citations[0].passage.document.external_id == "howto/bike-tyre"
    assert follow_up.turn == 2
    assert Turn.objects.get(order=2).query == condense.summary["query"]
    assert Trace.objects.get(pk=follow_up.trace_id).steps.filter(stage="condense").exists()  # shown in the trace


def test_a_follow_up_with_an_llm_is_rephrased_from_the_conversation(corpus, member):
    first = conversation_ask(AnswerRequest(question=FIRST, use_llm=False), tenant=corpus, user=member)
    llm = ScriptedLLM(tool_reply={"query": "glue for patching a bicycle inner tube"}, chat_reply="Rubber glue [1].")
    follow_up = conversation_ask(
        AnswerRequest(question=FOLLOW_UP, conversation_id=first.conversation_id), tenant=corpus, user=member, llm=llm
    )
    condense = next(step for step in follow_up.steps if step.stage == "condense")
    assert condense.summary == {"by": "llm", "history": 1, "query": "glue for patching a bicycle inner tube"}
    sent = llm.calls[0][1]  # the rephrase call saw the earlier question before the follow-up
    assert [m["content"] for m in sent[1:]] == [FIRST, FOLLOW_UP]


def test_an_llm_failure_while_condensing_falls_back_to_carried_terms(corpus, member):
    from llm import LLMUnavailable

    first = conversation_ask(AnswerRequest(question=FIRST, use_llm=False), tenant=corpus, user=member)
    llm = ScriptedLLM(tool_reply=LLMUnavailable("The LLM endpoint refused the connection."))
    follow_up = conversation_ask(
        AnswerRequest(question=FOLLOW_UP, conversation_id=first.conversation_id), tenant=corpus, user=member, llm=llm
    )
    condense = next(step for step in follow_up.steps if step.stage == "condense")
    assert condense.summary["by"] == "key terms" and condense.summary["fallback"] == "key terms"
    assert follow_up.degraded


def test_someone_elses_conversation_cannot_be_continued_and_nothing_is_stored(corpus, member):
    first = conversation_ask(AnswerRequest(question=FIRST), tenant=corpus, user=member)
    colleague = MembershipFactory(tenant=corpus).user
    with pytest.raises(NotFound):
        conversation_ask(
            AnswerRequest(question=FOLLOW_UP, conversation_id=first.conversation_id), tenant=corpus, user=colleague
        )
    assert Turn.objects.count() == 1


def test_a_follow_up_with_the_real_local_llm_is_condensed_by_it(corpus, member, local_llm_url):
    from llm.local import MODEL_ALIAS

    llm = LLMClient(MODEL_ALIAS, base_url=local_llm_url, api_key="local", timeout_s=600)
    first = conversation_ask(AnswerRequest(question=FIRST, use_llm=False), tenant=corpus, user=member)
    follow_up = conversation_ask(
        AnswerRequest(question=FOLLOW_UP, conversation_id=first.conversation_id, k=2),
        tenant=corpus,
        user=member,
        llm=llm,
    )
    condense = next(step for step in follow_up.steps if step.stage == "condense")
    # The tiny model's rewrite is recorded (not judged); if its tool call broke, the key terms stood in.
    if condense.summary["by"] == "llm":
        assert condense.usage.llm_calls >= 1
    else:
        assert condense.error and condense.summary["fallback"] == "key terms"
    assert condense.summary["query"]
    assert Turn.objects.get(order=2).query == condense.summary["query"]


# --- API ---------------------------------------------------------------------------------------


def test_the_api_threads_follow_ups_and_lists_the_callers_conversations(corpus, member):
    api = client_for(member)
    first = api.post(reverse("api:ask"), {"question": FIRST}, format="json").json()
    follow_up = api.post(
        reverse("api:ask"), {"question": FOLLOW_UP, "conversation": first["conversation_id"]}, format="json"
    ).json()
    assert (follow_up["conversation_id"], follow_up["turn"]) == (first["conversation_id"], 2)

    listed = api.get(reverse("api:conversation-list")).json()
    assert [(c["title"], c["turns"]) for c in listed["results"]] == [(FIRST, 2)]
    detail = api.get(reverse("api:conversation-detail", args=[first["conversation_id"]])).json()
    assert [t["question"] for t in detail["turns"]] == [FIRST, FOLLOW_UP]
    assert "bicycle" in detail["turns"][1]["query"]


def test_the_api_hides_other_users_conversations(corpus, member):
    first = client_for(member).post(reverse("api:ask"), {"question": FIRST}, format="json").json()
    colleague = client_for(MembershipFactory(tenant=corpus).user)
    url = reverse("api:conversation-detail", args=[first["conversation_id"]])
    assert colleague.get(url).status_code == 404
    assert colleague.delete(url).status_code == 404
    follow_up = colleague.post(
        reverse("api:ask"), {"question": FOLLOW_UP, "conversation": first["conversation_id"]}, format="json"
    )
    assert follow_up.status_code == 404
    assert colleague.get(reverse("api:conversation-list")).json()["results"] == []


def test_the_api_deletes_a_conversation_with_its_turns(corpus, member):
    api = client_for(member)
    first = api.post(reverse("api:ask"), {"question": FIRST}, format="json").json()
    assert api.delete(reverse("api:conversation-detail", args=[first["conversation_id"]])).status_code == 204
    assert not Conversation.objects.exists() and not Turn.objects.exists()


# --- portal ------------------------------------------------------------------------------------


def test_the_portal_continues_the_conversation_and_shows_its_earlier_turns(client, corpus, member):
    client.force_login(member)
    client.post(reverse("portal:ask"), {"question": FIRST})
    conversation = Conversation.objects.get()
    page = client.post(reverse("portal:ask"), {"question": FOLLOW_UP, "conversation": conversation.pk})
    html = page.content.decode()
    assert f'name="conversation" value="{conversation.pk}"' in html
    assert FIRST in html  # the earlier turn, above the answer
    assert conversation.turns.count() == 2


def test_the_portal_lists_conversations_and_reopens_one(client, corpus, member):
    client.force_login(member)
    client.post(reverse("portal:ask"), {"question": FIRST})
    conversation = Conversation.objects.get()
    listing = client.get(reverse("portal:conversations")).content.decode()
    assert f"?conversation={conversation.pk}" in listing
    reopened = client.get(reverse("portal:ask"), {"conversation": conversation.pk}).content.decode()
    assert FIRST in reopened and f'name="conversation" value="{conversation.pk}"' in reopened


def test_the_portal_refuses_someone_elses_conversation(client, corpus, member):
    conversation_ask(AnswerRequest(question=FIRST), tenant=corpus, user=member)
    client.force_login(MembershipFactory(tenant=corpus).user)
    conversation = Conversation.objects.get()
    assert client.get(reverse("portal:ask"), {"conversation": conversation.pk}).status_code == 404
    page = client.post(reverse("portal:ask"), {"question": FOLLOW_UP, "conversation": conversation.pk})
    assert "not yours or no longer exists" in page.content.decode()
    assert conversation.turns.count() == 1


# --- roles -------------------------------------------------------------------------------------


@pytest.fixture
def viewer(corpus):
    from core.models import Membership

    return MembershipFactory(tenant=corpus, role=Membership.Role.VIEWER).user


def test_a_viewers_question_is_answered_but_not_kept(corpus, viewer):
    run = conversation_ask(AnswerRequest(question=FIRST), tenant=corpus, user=viewer)
    assert run.answer.citations and run.conversation_id is None
    assert not Conversation.objects.exists()


def test_a_viewer_cannot_continue_a_conversation(corpus, viewer):
    response = client_for(viewer).post(reverse("api:ask"), {"question": FOLLOW_UP, "conversation": 1}, format="json")
    assert response.status_code == 403
    assert "Viewers do not keep conversations" in response.json()["error"]["message"]


def test_a_viewer_gets_no_feedback_buttons_and_cannot_give_feedback(client, corpus, viewer, member):
    client.force_login(viewer)
    page = client.post(reverse("portal:ask"), {"question": FIRST}).content.decode()
    assert 'class="feedback"' not in page and "Fixing a flat bicycle tyre" in page
    asked = conversation_ask(AnswerRequest(question=FIRST), tenant=corpus, user=member)
    url = reverse("api:trace-feedback", args=[asked.trace_id])
    assert client_for(viewer).post(url, {"rating": "up"}, format="json").status_code == 403
