"""Scripted walks over ``walk_corpus`` (``tests/conftest.py``): the shared corpus plus a travel
policy that points at the expense reports."""

import time

from knowledge.models import Chunk

QUESTION = "How do I get the costs of a flight paid back?"
EXPENSES_QUERY = "Expense reports section when and how trip costs are paid back"
TRAVEL_FACT = "Trip costs are paid back through expense reports."
EXPENSES_FACT = "Expense reports are submitted within thirty days of the trip, with every receipt."


def reply(*facts, sufficient=False, missing=()):
    """A fact-extraction reply: facts as (text, passage number), missing as (nextSource, expectedInfo)."""
    return {
        "facts": [{"fact": text, "relevance": "says how costs are paid back", "passage": n} for text, n in facts],
        "sufficient": sufficient,
        "missing": [{"nextSource": where, "expectedInfo": what} for where, what in missing],
    }


def two_rounds():
    """Round 1 reads the travel policy and asks for the expense reports; round 2 reads them."""
    return [
        reply((TRAVEL_FACT, 1), missing=[("Expense reports section", "when and how trip costs are paid back")]),
        reply((EXPENSES_FACT, 1), sufficient=True),
    ]


def chunk_of(tenant, external_id):
    return Chunk.objects.for_tenant(tenant).get(version__document__external_id=external_id, version__is_current=True)


def wait_for(client, walk_id, *statuses, timeout=60.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        state = client.get(f"/api/v1/walks/{walk_id}/").json()
        if state["status"] in statuses:
            return state
        time.sleep(0.2)
    raise AssertionError(f"walk {walk_id} never reached {statuses}: {state}")
