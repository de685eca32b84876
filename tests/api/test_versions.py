"""``as_of`` in the search, ask and stream APIs; every citation names its version and date."""

import pytest


def test_search_as_of_returns_the_older_version_with_its_number_and_date(versioned, member_client):
    response = member_client.post(
        "/api/v1/search/", {"query": "PostgreSQL versions", "as_of": "2024-06-01"}, format="json"
    )

    assert response.status_code == 200
    top = response.json()["results"][0]
    assert (top["version"], top["version_date"], top["version_current"]) == (1, "2023-04-03", False)
    assert "PostgreSQL 12" in top["text"]


def test_search_without_as_of_returns_the_current_version(versioned, member_client):
    response = member_client.post("/api/v1/search/", {"query": "PostgreSQL versions"}, format="json")

    top = response.json()["results"][0]
    assert (top["version"], top["version_date"], top["version_current"]) == (2, "2025-04-02", True)


def test_ask_as_of_cites_the_older_version_and_a_default_ask_the_current_one(versioned, member_client):
    question = {"question": "Which PostgreSQL versions are supported?", "extractive": True}

    old = member_client.post("/api/v1/ask/", {**question, "as_of": "2024-06-01"}, format="json").json()
    new = member_client.post("/api/v1/ask/", question, format="json").json()

    assert "PostgreSQL 12" in old["answer"] and "PostgreSQL 14" not in old["answer"]
    assert {(c["version"], c["version_date"]) for c in old["citations"]} == {(1, "2023-04-03")}
    assert "PostgreSQL 14" in new["answer"]
    assert {(c["version"], c["version_date"]) for c in new["citations"]} == {(2, "2025-04-02")}


@pytest.mark.parametrize("endpoint", ["/api/v1/search/", "/api/v1/ask/", "/api/v1/ask/stream/"])
@pytest.mark.parametrize("bad", ["2024-13-01", "June 2024", "2024-06-01T10:00"])
def test_a_bad_as_of_date_is_a_400_naming_the_field(versioned, member_client, endpoint, bad):
    payload = {"query": "PostgreSQL", "question": "PostgreSQL?", "as_of": bad}

    response = member_client.post(endpoint, payload, format="json")

    assert response.status_code == 400
    assert "as_of" in str(response.json()["error"]["message"])


@pytest.mark.django_db(transaction=True)
def test_a_streamed_answer_as_of_a_date_cites_the_older_version(versioned, member_client):
    from tests.api.test_ask_stream import sse_events

    response = member_client.post(
        "/api/v1/ask/stream/",
        {"question": "Which PostgreSQL versions are supported?", "extractive": True, "as_of": "2024-06-01"},
        format="json",
        HTTP_ACCEPT="text/event-stream",
    )

    answer = dict(sse_events(response))["answer"]
    assert {(c["version"], c["version_date"]) for c in answer["citations"]} == {(1, "2023-04-03")}
