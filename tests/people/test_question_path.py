"""A question from each entry point reaches the run through at most 12 functions in 8 files.

Counted by ``tests/question_path.py`` (the functions that receive the question, as its text or as
the ``AnswerRequest``, from the entry to the run's state); ``docs/architecture.md`` has the table.
"""

import json

import pytest
from django.test import Client
from django.urls import reverse

from core.models import Membership
from mcp_server.tools import AskArguments, ask_run
from tests.api.conftest import client_for
from tests.question_path import question_path

QUESTION = "How do I fix a flat bicycle tyre?"
MOST_FUNCTIONS, MOST_FILES = 12, 8


@pytest.fixture(autouse=True)
def no_llm(monkeypatch):
    monkeypatch.setattr("retrieval.pipeline.configured_llm", lambda: None)


def assert_short(path) -> None:
    figures = json.dumps(path.as_dict(), indent=1)
    assert path.functions <= MOST_FUNCTIONS and path.files <= MOST_FILES, figures


def test_a_question_asked_in_the_portal_reaches_the_run_through_few_functions(corpus, member):
    client = Client()
    client.force_login(member)

    def call():
        response = client.post(reverse("portal:ask"), {"question": QUESTION})
        assert response.status_code == 200 and b"tyre" in response.content

    assert_short(question_path(call, QUESTION, entry=("portal/views.py", "ask")))


def test_a_question_asked_through_the_rest_api_reaches_the_run_through_few_functions(corpus, member):
    client = client_for(member)

    def call():
        response = client.post("/api/v1/ask/", {"question": QUESTION}, format="json")
        assert response.status_code == 200, response.content

    assert_short(question_path(call, QUESTION, entry=("people/ask_apis.py", "AskApi.post")))


def test_a_question_asked_through_mcp_reaches_the_run_through_few_functions(corpus, member):
    membership = Membership.objects.get(tenant=corpus, user=member)

    def call():
        assert ask_run(membership=membership, arguments=AskArguments(question=QUESTION))["citations"]

    assert_short(question_path(call, QUESTION, entry=("mcp_server/tools.py", "ask_run")))
