from io import StringIO

from django.core.management import call_command

from demo.management.commands import demo as demo_command
from demo.services import EXAMPLE_QUESTION, demo_setup


def test_demo_without_serving_prints_the_sources_and_a_cited_example_answer(downloads, db):
    out = StringIO()

    call_command("demo", "--no-serve", stdout=out, stderr=StringIO())

    text = out.getvalue()
    assert "  howto: 1 new, 0 updated, 0 unchanged" in text
    assert f"Q: {EXAMPLE_QUESTION}\nShort answer: " in text  # the short answer first, then the explanation
    assert "  [1] " in text and "https://docs.djangoproject.com/en/5.2/" in text
    assert "Portal  http://127.0.0.1:8000/" in text


def test_the_example_answer_comes_from_the_tenants_documents(downloads, db):
    setup = demo_setup(downloads=downloads)

    answer = demo_command.example_answer(tenant=setup.tenant, question=EXAMPLE_QUESTION)

    assert answer.citations
    assert any("custom-model-fields" in c.as_dict()["document"] for c in answer.citations)
