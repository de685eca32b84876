"""A steered walk outlives the process running it: its lease runs out, and it is taken over and
goes on from its last round (paused if it was), through the API and the beat sweep."""

import time
from datetime import timedelta

import pytest
from django.utils import timezone

from knowledge.models import Chunk
from retrieval.models import TraceStep
from retrieval.pipeline import pipeline_answer
from retrieval.walks.models import Walk
from retrieval.walks.steering import walk_execute, walks_recover
from tests.api.conftest import client_for
from tests.retrieval.doubles import ScriptedLLM
from tests.walks.scripts import (
    EXPENSES_FACT,
    EXPENSES_QUERY,
    QUESTION,
    TRAVEL_FACT,
    chunk_of,
    reply,
    two_rounds,
    wait_for,
)

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def scripted(monkeypatch):
    llm = ScriptedLLM(
        structured_replies=two_rounds(),
        structured_reply=reply(sufficient=True),
        chat_reply="Submit an expense report [1].",
    )
    monkeypatch.setattr("retrieval.pipeline.configured_llm", lambda: llm)
    return llm


def process_stops(walk_id, **state):
    """What a process that stopped leaves: another worker's lease on the walk, run out. The thread
    that ran the walk sees it is no longer its own at its next read and ends."""
    Walk.objects.filter(pk=walk_id).update(
        worker_id="gone-host/4242/dead", lease_expires_at=timezone.now() - timedelta(seconds=1), **state
    )


def wait_until(condition, timeout=30.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.1)
    raise AssertionError("the condition never held")


def test_a_paused_walk_whose_process_stopped_is_taken_over_still_paused_and_resumes(asker, scripted):
    api = client_for(asker)
    walk_id = api.post("/api/v1/walks/", {"question": QUESTION, "pause_after": 1, "k": 1}, format="json").json()["id"]
    paused = wait_for(api, walk_id, "paused")
    process_stops(walk_id)
    taken = api.get(f"/api/v1/walks/{walk_id}/").json()  # reading it is enough to take it over
    assert taken["status"] == "paused"
    wait_until(lambda: Walk.objects.get(pk=walk_id).worker_id not in ("", "gone-host/4242/dead"))
    walk = Walk.objects.get(pk=walk_id)
    assert walk.status == "paused" and walk.lease_expires_at > timezone.now()
    assert api.post(f"/api/v1/walks/{walk_id}/resume/").status_code == 200
    done = wait_for(api, walk_id, "done")
    assert [f["fact"] for f in done["facts"]] == [TRAVEL_FACT, EXPENSES_FACT]
    assert [p["round"] for p in done["path"]] == [1, 2]
    assert done["answer"]["text"] and done["trace_id"]
    steps = {s.stage: s.summary for s in TraceStep.objects.filter(trace_id=done["trace_id"])}
    assert steps["walk.resumed"]["round"] == 1 and steps["walk.resumed"]["paused"] is True
    assert [f["fact"] for f in steps["walk.resumed"]["facts"]] == [TRAVEL_FACT]
    assert steps["walk.round2"]["queries"] == paused["next_queries"] == [EXPENSES_QUERY]
    assert "walk.round1" not in steps  # round 1 is not run again
    assert len(scripted.calls) == 3  # two fact extractions, one answer: nothing twice


def test_a_walk_whose_process_stopped_between_rounds_goes_on_with_its_next_queries(asker, scripted):
    api = client_for(asker)
    walk_id = api.post("/api/v1/walks/", {"question": QUESTION, "pause_after": 1, "k": 1}, format="json").json()["id"]
    wait_for(api, walk_id, "paused")
    # As if it had been resumed and its process stopped before round 2 was recorded.
    process_stops(walk_id, status="running", pause_after=None)
    assert walks_recover() == [walk_id]  # the beat sweep, over every tenant
    done = wait_for(api, walk_id, "done")
    assert [f["fact"] for f in done["facts"]] == [TRAVEL_FACT, EXPENSES_FACT]
    steps = {s.stage: s.summary for s in TraceStep.objects.filter(trace_id=done["trace_id"])}
    assert steps["walk.resumed"]["queries"] == [EXPENSES_QUERY] and steps["walk.resumed"]["paused"] is False
    assert steps["walk"]["rounds"] == 2 and steps["walk"]["stop_reason"] == "sufficient"


def test_a_walk_whose_process_is_alive_is_never_taken_over_and_a_walk_runs_once(asker, scripted):
    api = client_for(asker)
    walk_id = api.post("/api/v1/walks/", {"question": QUESTION, "pause_after": 1, "k": 1}, format="json").json()["id"]
    wait_for(api, walk_id, "paused")
    holder = Walk.objects.get(pk=walk_id).worker_id
    assert holder and walks_recover() == []
    # A second launch of the same walk (a redelivered task) finds it held and leaves it alone.
    again = walk_execute(walk_id=walk_id, answer=pipeline_answer, llm=scripted)
    assert again.status == "paused" and again.worker_id == holder
    api.post(f"/api/v1/walks/{walk_id}/stop/")
    wait_for(api, walk_id, "stopped")
    process_stops(walk_id)
    assert walks_recover() == []  # an ended walk stays ended


def test_two_sweeps_launch_a_stopped_walk_once(asker, scripted):
    api = client_for(asker)
    walk_id = api.post("/api/v1/walks/", {"question": QUESTION, "pause_after": 1, "k": 1}, format="json").json()["id"]
    wait_for(api, walk_id, "paused")
    process_stops(walk_id)
    assert walks_recover() == [walk_id]
    assert walks_recover() == []
    api.post(f"/api/v1/walks/{walk_id}/stop/")
    assert wait_for(api, walk_id, "stopped")["answer"]["text"]


def test_a_walk_taken_over_leaves_out_what_its_asker_may_no_longer_read(asker, scripted, walk_corpus):
    api = client_for(asker)
    walk_id = api.post("/api/v1/walks/", {"question": QUESTION, "pause_after": 1, "k": 1}, format="json").json()["id"]
    wait_for(api, walk_id, "paused")
    travel = chunk_of(walk_corpus, "finance/travel")
    process_stops(walk_id)
    Chunk.objects.filter(pk=travel.pk).update(is_current=False)  # a newer version replaced it meanwhile
    api.get(f"/api/v1/walks/{walk_id}/")
    wait_until(lambda: Walk.objects.get(pk=walk_id).worker_id not in ("", "gone-host/4242/dead"))
    api.post(f"/api/v1/walks/{walk_id}/resume/")
    done = wait_for(api, walk_id, "done")
    steps = {s.stage: s.summary for s in TraceStep.objects.filter(trace_id=done["trace_id"])}
    assert steps["walk.resumed"]["facts"] == [] and travel.pk not in steps["walk.resumed"]["chunks_read"]
    assert TRAVEL_FACT not in [f["fact"] for f in steps["walk"]["facts"]]
    answer_prompt = " ".join(m["content"] for m in scripted.calls[-1][1])
    assert "Book every flight through the travel desk" not in answer_prompt


def test_the_sweep_ends_an_unsteered_walk_its_answer_request_left_running(walk_corpus):
    from retrieval.tasks import walks_recover_task

    left = Walk.objects.create(tenant=walk_corpus, question=QUESTION, status="running")
    recent = Walk.objects.create(tenant=walk_corpus, question=QUESTION, status="running")
    Walk.objects.filter(pk=left.pk).update(updated_at=timezone.now() - timedelta(hours=2))
    assert walks_recover_task() == []
    left.refresh_from_db()
    recent.refresh_from_db()
    assert left.status == "failed" and left.finished_at and "process" in left.error
    assert recent.status == "running"  # an answer request may still be running it
