from io import StringIO

from django.core.management import call_command

from demo.management.commands import demo as demo_command
from demo.services import EXAMPLE_QUESTION, demo_setup
from knowledge.models import Document


# transactional_db: the other sources sync in a thread, on a connection of its own.
def test_demo_without_serving_prints_the_sources_and_a_cited_example_answer(downloads, transactional_db):
    out = StringIO()

    call_command("demo", "--no-serve", stdout=out, stderr=StringIO())

    text = out.getvalue()
    assert "  howto: 1 new, 0 updated, 0 unchanged" in text
    assert f"Q: {EXAMPLE_QUESTION}\n" in text
    assert "  [1] " in text and "https://docs.djangoproject.com/en/5.2/howto/custom-model-fields" in text
    assert "Portal  http://127.0.0.1:8000/" in text


def test_demo_answers_from_the_first_source_and_says_the_others_are_still_syncing(downloads, transactional_db):
    out = StringIO()

    call_command("demo", "--no-serve", stdout=out, stderr=StringIO())

    text = out.getvalue()
    answer_at, all_in_at = text.index(f"Q: {EXAMPLE_QUESTION}"), text.index("All 5 sources in")
    assert text.index("  howto: 1 new") < answer_at < all_in_at
    assert "still syncing: intro-faq, ref, releases, topics" in text
    for name in ("intro-faq", "topics", "ref", "releases"):
        assert text.index(f"  {name}: ") > answer_at  # synced after the answer, in the background


def test_no_serve_waits_for_every_source_and_a_second_run_finds_nothing_new(downloads, transactional_db):
    call_command("demo", "--no-serve", stdout=StringIO(), stderr=StringIO())
    out = StringIO()

    call_command("demo", "--no-serve", stdout=out, stderr=StringIO())

    assert Document.objects.filter(tenant__slug="demo").count() == 6
    text = out.getvalue()
    assert text.count(": nothing new (") == 5
    assert "All 5 sources in" in text


def test_the_example_answer_comes_from_the_tenants_documents(downloads, db):
    setup = demo_setup(downloads=downloads)

    answer = demo_command.example_answer(tenant=setup.tenant, question=EXAMPLE_QUESTION)

    assert answer.citations
    assert any("custom-model-fields" in c.as_dict()["document"] for c in answer.citations)
