"""The command line leads an answer as the portal does: the short answer, else the lead passage."""

import io

import pytest
from django.core.management import call_command

from people.answer_text import answer_head_lines
from retrieval.stages.generate.extractive import LABEL
from retrieval.types import Answer

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def no_llm(monkeypatch):
    monkeypatch.setattr("retrieval.pipeline.configured_llm", lambda: None)


def ask_output(corpus, question: str) -> list[str]:
    out = io.StringIO()
    call_command("ask", question, "--tenant", corpus.slug, stdout=out, stderr=io.StringIO())
    return out.getvalue().splitlines()


def test_ask_prints_the_lead_passage_before_the_explanation_of_a_how_to_answer(corpus):
    lines = ask_output(corpus, "How do I fix a flat bicycle tyre?")

    source, paragraph = lines[0], lines[1]
    assert source.startswith("[") and source.endswith("Fixing a flat bicycle tyre")
    assert "puncture" in paragraph
    assert lines[2] == LABEL  # then the explanation
    number = source[1 : source.index("]")]
    assert any(line.startswith(f"[{number}] Fixing a flat bicycle tyre (v1") for line in lines[3:])


def test_ask_prints_the_short_answer_first_and_no_lead_passage(corpus):
    lines = ask_output(corpus, "How long should spaghetti cook?")

    assert lines[0].startswith("Short answer: ") and "nine to eleven minutes" in lines[0]
    assert lines[1] == LABEL


def test_a_lead_passage_names_its_section_unless_it_is_the_title():
    lead = {"n": 2, "document": "d", "title": "Guide", "section": "Setup › Keys", "uri": "", "text": "Make a key."}
    answer = Answer(question="q", text="Explained [2].", mode="extractive", citations=[], lead=lead)

    assert answer_head_lines(answer) == ["[2] Guide · Setup › Keys", "Make a key."]
    assert answer_head_lines(Answer(question="q", text="", mode="extractive", citations=[])) == []
