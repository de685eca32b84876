"""The real local model (llama.cpp + Qwen2.5-Coder-1.5B) drives a steered walk end to end: it
pauses after round 1, a person removes a fact and adds a query, and it resumes to an answer that
shows both. Skipped when the model is not installed (``requirements-llm.txt``)."""

import time

import pytest

from llm import LLMClient
from retrieval.models import TraceStep
from retrieval.walks.models import Fact
from tests.api.conftest import client_for
from tests.factories import MembershipFactory
from tests.walks.scripts import QUESTION

pytestmark = pytest.mark.django_db(transaction=True)

ADDED_QUERY = "Expense reports thirty days receipts"


def wait_for(client, walk_id, *statuses, timeout=900.0):
    deadline = time.monotonic() + timeout
    state = None
    while time.monotonic() < deadline:
        state = client.get(f"/api/v1/walks/{walk_id}/").json()
        if state["status"] in statuses:
            return state
        assert state["status"] not in ("failed",), state
        time.sleep(1.0)
    raise AssertionError(f"walk {walk_id} never reached {statuses}: {state}")


def test_the_real_qwen_model_walks_pauses_is_edited_and_resumes_to_an_answer(walk_corpus, qwen_llm_url, monkeypatch):
    llm = LLMClient("qwen2.5-1.5b", base_url=qwen_llm_url, api_key="local", timeout_s=600, retries=0)
    monkeypatch.setattr("retrieval.pipeline.configured_llm", lambda: llm)
    api = client_for(MembershipFactory(tenant=walk_corpus).user)
    started = api.post("/api/v1/walks/", {"question": QUESTION, "pause_after": 1, "k": 2}, format="json")
    assert started.status_code == 202, started.content
    walk_id = started.json()["id"]

    paused = wait_for(api, walk_id, "paused", "done")
    assert paused["status"] == "paused" and paused["round"] == 1, paused
    edit: dict = {"add_queries": [ADDED_QUERY]}
    removed = paused["facts"][0]["id"] if paused["facts"] else None
    if removed is not None:
        edit["remove_facts"] = [removed]
    assert api.patch(f"/api/v1/walks/{walk_id}/", edit, format="json").status_code == 200
    assert api.post(f"/api/v1/walks/{walk_id}/resume/").status_code == 200

    done = wait_for(api, walk_id, "done", "stopped")
    assert done["answer"]["text"].strip()
    assert ADDED_QUERY in [p["query"] for p in done["path"] if p["origin"] == "person"]
    steered = TraceStep.objects.get(trace_id=done["trace_id"], stage="walk.steered1").summary
    assert steered["queries_added"] == [ADDED_QUERY]
    if removed is not None:
        assert steered["facts_removed"] == [removed]
        assert Fact.objects.get(pk=removed).retired_reason == "wrong"
        walk_facts = TraceStep.objects.get(trace_id=done["trace_id"], stage="walk").summary["facts"]
        assert removed not in [f.get("fact_id") for f in walk_facts]
