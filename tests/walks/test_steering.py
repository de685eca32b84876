"""Steering a walk through the API: start it, watch it, pause after a round, edit, resume or stop."""

import pytest

from retrieval.models import TraceStep
from retrieval.walks.models import Fact, Walk
from tests.api.conftest import client_for
from tests.factories import MembershipFactory
from tests.retrieval.doubles import ScriptedLLM
from tests.walks.scripts import EXPENSES_FACT, QUESTION, TRAVEL_FACT, reply, wait_for

pytestmark = pytest.mark.django_db(transaction=True)

ADDED_QUERY = "Bicycle tyre puncture patch"


@pytest.fixture
def scripted(monkeypatch):
    """The configured LLM is a scripted one: round 1 reads the travel policy and names the expense
    reports; later rounds keep a fact from the first passage and say it is enough."""
    llm = ScriptedLLM(
        structured_replies=[
            reply((TRAVEL_FACT, 1), missing=[("Expense reports section", "when and how trip costs are paid back")]),
            reply((EXPENSES_FACT, 1), ("Patch a tyre with glue and a rubber patch.", 2), sufficient=True),
        ],
        structured_reply=reply(sufficient=True),
        chat_reply="Submit an expense report [1].",
    )
    monkeypatch.setattr("retrieval.pipeline.configured_llm", lambda: llm)
    return llm


def test_a_walk_started_through_the_api_runs_in_the_background_and_answers(asker, scripted):
    api = client_for(asker)
    started = api.post("/api/v1/walks/", {"question": QUESTION, "k": 1}, format="json")
    assert started.status_code == 202, started.content
    assert started.json()["status"] == "running"
    done = wait_for(api, started.json()["id"], "done")
    assert [f["fact"] for f in done["facts"]][:2] == [TRAVEL_FACT, EXPENSES_FACT]
    assert done["answer"]["text"] and done["answer"]["citations"] and done["trace_id"]
    assert [p["origin"] for p in done["path"]] == ["question", "facts"]


def test_pause_remove_a_fact_add_a_query_and_resume_the_answer_shows_it(asker, scripted):
    api = client_for(asker)
    walk_id = api.post("/api/v1/walks/", {"question": QUESTION, "pause_after": 1, "k": 1}, format="json").json()["id"]
    paused = wait_for(api, walk_id, "paused")
    assert paused["round"] == 1 and [f["fact"] for f in paused["facts"]] == [TRAVEL_FACT]
    assert paused["next_queries"] == ["Expense reports section when and how trip costs are paid back"]
    removed = paused["facts"][0]["id"]
    edited = api.patch(
        f"/api/v1/walks/{walk_id}/",
        {"remove_facts": [removed], "add_queries": [ADDED_QUERY]},
        format="json",
    )
    assert edited.status_code == 200, edited.content
    assert edited.json()["next_queries"][-1] == ADDED_QUERY
    assert api.post(f"/api/v1/walks/{walk_id}/resume/").status_code == 200
    done = wait_for(api, walk_id, "done")
    assert [p["query"] for p in done["path"] if p["origin"] == "person"] == [ADDED_QUERY]
    assert next(f for f in done["facts"] if f["id"] == removed)["removed"] is True
    steps = {s.stage: s.summary for s in TraceStep.objects.filter(trace_id=done["trace_id"])}
    assert steps["walk.steered1"]["facts_removed"] == [removed]
    assert steps["walk.steered1"]["queries_added"] == [ADDED_QUERY]
    assert TRAVEL_FACT not in [f["fact"] for f in steps["walk"]["facts"]]
    answer_prompt = " ".join(m["content"] for m in scripted.calls[-1][1])
    # Written from the chunks behind the facts kept: the travel policy's chunk, whose only fact was
    # removed, is left out; the expense reports' chunk is in.
    assert "Book every flight through the travel desk" not in answer_prompt
    assert "Submit travel expense reports within thirty days" in answer_prompt
    assert Fact.objects.get(pk=removed).retired_reason == "wrong"


def test_editing_the_question_and_a_fact_while_paused_carries_into_the_next_round(asker, scripted):
    api = client_for(asker)
    walk_id = api.post("/api/v1/walks/", {"question": QUESTION, "pause_after": 1, "k": 1}, format="json").json()["id"]
    fact_id = wait_for(api, walk_id, "paused")["facts"][0]["id"]
    new_question = "How do I get a train ticket paid back?"
    response = api.patch(
        f"/api/v1/walks/{walk_id}/",
        {"question": new_question, "edit_facts": {str(fact_id): "Train tickets are paid back like flights."}},
        format="json",
    )
    assert response.status_code == 200, response.content
    api.post(f"/api/v1/walks/{walk_id}/resume/")
    done = wait_for(api, walk_id, "done")
    assert done["question"] == new_question
    round2_prompt = scripted.calls[1][1][-1]["content"]
    assert new_question in round2_prompt and "Train tickets are paid back like flights." in round2_prompt


def test_stop_while_paused_answers_from_the_facts_so_far(asker, scripted):
    api = client_for(asker)
    walk_id = api.post("/api/v1/walks/", {"question": QUESTION, "pause_after": 1, "k": 1}, format="json").json()["id"]
    wait_for(api, walk_id, "paused")
    assert api.post(f"/api/v1/walks/{walk_id}/stop/").status_code == 200
    stopped = wait_for(api, walk_id, "stopped")
    assert stopped["stop_reason"] == "stopped" and stopped["round"] == 1 and stopped["answer"]["text"]


def test_a_paused_walk_times_out_into_an_answer(asker, scripted, settings):
    settings.KB_WALK_PAUSE_TIMEOUT_S = 1.0
    api = client_for(asker)
    walk_id = api.post("/api/v1/walks/", {"question": QUESTION, "pause_after": 1, "k": 1}, format="json").json()["id"]
    assert wait_for(api, walk_id, "stopped")["answer"]["text"]


def test_a_walk_is_edited_only_while_paused_and_bad_edits_change_nothing(asker, scripted):
    api = client_for(asker)
    walk_id = api.post("/api/v1/walks/", {"question": QUESTION, "pause_after": 1, "k": 1}, format="json").json()["id"]
    paused = wait_for(api, walk_id, "paused")
    bad = api.patch(f"/api/v1/walks/{walk_id}/", {"remove_facts": [999999], "question": "changed?"}, format="json")
    assert bad.status_code == 400 and "No fact 999999" in bad.json()["error"]["message"]
    assert api.get(f"/api/v1/walks/{walk_id}/").json()["question"] == paused["question"]
    api.post(f"/api/v1/walks/{walk_id}/resume/")
    wait_for(api, walk_id, "done")
    late = api.patch(f"/api/v1/walks/{walk_id}/", {"question": "too late"}, format="json")
    assert late.status_code == 409 and late.json()["error"]["code"] == "conflict"
    assert api.post(f"/api/v1/walks/{walk_id}/resume/").status_code == 409


def test_bad_walk_requests_get_clear_errors(asker, scripted):
    api = client_for(asker)
    assert api.post("/api/v1/walks/", {"question": ""}, format="json").status_code == 400
    response = api.post("/api/v1/walks/", {"question": QUESTION, "pause_after": 0}, format="json")
    assert response.status_code == 400
    assert Walk.objects.count() == 0


def test_nobody_but_the_asker_reads_or_steers_a_walk(asker, scripted, walk_corpus, other_tenant_corpus):
    api = client_for(asker)
    walk_id = api.post("/api/v1/walks/", {"question": QUESTION, "pause_after": 1, "k": 1}, format="json").json()["id"]
    wait_for(api, walk_id, "paused")
    colleague = client_for(MembershipFactory(tenant=walk_corpus).user)
    stranger = client_for(MembershipFactory(tenant=other_tenant_corpus).user)
    for other in (colleague, stranger):
        assert other.get(f"/api/v1/walks/{walk_id}/").status_code == 404
        assert other.patch(f"/api/v1/walks/{walk_id}/", {"question": "mine now"}, format="json").status_code == 404
        assert other.post(f"/api/v1/walks/{walk_id}/stop/").status_code == 404
    api.post(f"/api/v1/walks/{walk_id}/stop/")
    wait_for(api, walk_id, "stopped")
