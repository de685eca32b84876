"""Facts as memory: every walk keeps its facts with their provenance and its path; the memory field
finds chunks through them under the asker's access rules and versions; wrong and superseded facts
are retired."""

from datetime import timedelta

import pytest
from django.utils import timezone

from knowledge.ingestion.readers import ReadDocument
from knowledge.services import documents_ingest
from retrieval.filters import RetrievalFilter, retrieval_filter
from retrieval.pipeline import pipeline_answer, pipeline_retrieve
from retrieval.request import AnswerRequest
from retrieval.walks.memory import fact_correct, fact_retire, facts_search, memory_search
from retrieval.walks.models import Fact, Walk, WalkStep
from tests.acl_world import tenant_world
from tests.conftest import TRAVEL
from tests.retrieval.doubles import ScriptedLLM
from tests.walks.scripts import EXPENSES_FACT, QUESTION, TRAVEL_FACT, chunk_of, reply, two_rounds


def walk(tenant, llm, **kwargs):
    question = AnswerRequest(question=QUESTION, pipeline="walkingrag", k=1)
    return pipeline_answer(question, tenant=tenant, llm=llm, overrides={"walk_max_rounds": 3}, **kwargs)


def test_a_walk_keeps_each_fact_with_its_chunk_version_walk_trace_round_and_embedding(walk_corpus, member):
    run = walk(walk_corpus, ScriptedLLM(structured_replies=two_rounds()), user=member)
    facts = list(Fact.objects.for_tenant(walk_corpus).order_by("id"))
    assert [f.text for f in facts] == [TRAVEL_FACT, EXPENSES_FACT]
    travel, expenses = chunk_of(walk_corpus, "finance/travel"), chunk_of(walk_corpus, "finance/expenses")
    assert [(f.chunk_id, f.version_id, f.round) for f in facts] == [
        (travel.pk, travel.version_id, 1),
        (expenses.pk, expenses.version_id, 2),
    ]
    walk_row = Walk.objects.get(tenant=walk_corpus)
    assert walk_row.user == member and walk_row.status == "done" and walk_row.stop_reason == "sufficient"
    assert {f.walk_id for f in facts} == {walk_row.pk} and {f.trace_id for f in facts} == {run.trace_id}
    assert walk_row.trace_id == run.trace_id
    assert all(f.embedding is not None and len(f.embedding) == 384 for f in facts)
    assert facts[0].next_sources == ["Expense reports section when and how trip costs are paid back"]


def test_the_walk_path_records_which_query_found_which_chunks_and_which_facts_led_to_it(walk_corpus):
    walk(walk_corpus, ScriptedLLM(structured_replies=two_rounds()))
    steps = list(WalkStep.objects.for_tenant(walk_corpus).order_by("round"))
    travel, expenses = chunk_of(walk_corpus, "finance/travel"), chunk_of(walk_corpus, "finance/expenses")
    first_fact = Fact.objects.get(text=TRAVEL_FACT)
    assert [(s.round, s.origin, s.chunk_ids, s.fact_count, s.false_start) for s in steps] == [
        (1, "question", [travel.pk], 1, False),
        (2, "facts", [expenses.pk], 1, False),
    ]
    assert steps[0].query == QUESTION and steps[1].led_by == [first_fact.pk]


def test_a_query_that_finds_nothing_useful_is_a_false_start(walk_corpus):
    replies = [reply((TRAVEL_FACT, 1), missing=[("Pasta", "cooking times")]), reply()]
    walk(walk_corpus, ScriptedLLM(structured_replies=replies))
    last = WalkStep.objects.for_tenant(walk_corpus).order_by("-round").first()
    assert last.round == 2 and last.fact_count == 0 and last.false_start
    assert Walk.objects.get(tenant=walk_corpus).stop_reason == "no_new_facts"


def test_the_memory_field_brings_the_chunk_a_fact_came_from(walk_corpus):
    walk(walk_corpus, ScriptedLLM(structured_replies=two_rounds()))
    expenses = chunk_of(walk_corpus, "finance/expenses")
    where = RetrievalFilter.for_tenant(walk_corpus)
    ranking = memory_search(query="receipts within thirty days", where=where, embedder=walk_corpus.embedder)
    assert ranking[0][0] == expenses.pk
    lexical_only = memory_search(query="thirty days receipt", where=where)
    assert lexical_only[0][0] == expenses.pk


def test_with_a_memory_weight_search_fuses_the_memory_list_and_cites_chunks_not_facts(walk_corpus):
    walk(walk_corpus, ScriptedLLM(structured_replies=two_rounds()))
    walk_corpus.retrieval_config = {"memory_weight": 0.5}
    walk_corpus.save(update_fields=["retrieval_config"])
    run = pipeline_retrieve(
        AnswerRequest(question="How are trip costs paid back?", k=3, use_llm=False), tenant=walk_corpus
    )
    retrieve = next(s for s in run.steps if s.stage == "retrieve")
    assert "memory" in retrieve.summary["counts"]
    assert {r.chunk.version.document.external_id for r in run.results} >= {"finance/travel", "finance/expenses"}
    answer = pipeline_answer(
        AnswerRequest(question="How are trip costs paid back?", use_llm=False, k=3), tenant=walk_corpus
    )
    assert all(c.passage.anchor.pk for c in answer.answer.citations)


def test_memory_is_off_by_default(walk_corpus):
    walk(walk_corpus, ScriptedLLM(structured_replies=two_rounds()))
    run = pipeline_retrieve(
        AnswerRequest(question="How are trip costs paid back?", k=3, use_llm=False), tenant=walk_corpus
    )
    assert "memory" not in next(s for s in run.steps if s.stage == "retrieve").summary["counts"]


def test_a_fact_marked_wrong_is_never_searched_and_a_correction_is_searched_by_its_new_text(walk_corpus):
    walk(walk_corpus, ScriptedLLM(structured_replies=two_rounds()))
    where = RetrievalFilter.for_tenant(walk_corpus)
    wrong = Fact.objects.get(text=EXPENSES_FACT)
    fact_retire(fact=wrong)
    assert all(fact_id != wrong.pk for fact_id, _c, _s in facts_search(query="thirty days receipt", where=where))
    right = Fact.objects.get(text=TRAVEL_FACT)
    fact_correct(fact=right, text="Flight costs come back through the quarterly reimbursement portal.")
    found = facts_search(query="quarterly reimbursement portal", where=where)
    assert found[0][0] == right.pk
    right.refresh_from_db()
    assert right.corrected


def test_a_new_version_retires_its_facts_and_as_of_still_finds_them(walk_corpus, source):
    walk(walk_corpus, ScriptedLLM(structured_replies=two_rounds()))
    fact = Fact.objects.get(text=TRAVEL_FACT)
    later = timezone.now() + timedelta(days=3)
    rewritten = ReadDocument(
        external_id=TRAVEL.external_id, title=TRAVEL.title, text=TRAVEL.text + " Rewritten.", published_at=later
    )
    documents_ingest(tenant=walk_corpus, source=source, documents=[rewritten])
    fact.refresh_from_db()
    assert fact.retired_reason == "superseded" and fact.retired_at is not None
    now = RetrievalFilter.for_tenant(walk_corpus)
    assert all(f != fact.pk for f, _c, _s in facts_search(query="expense reports paid back", where=now))
    then = RetrievalFilter.for_tenant(walk_corpus, as_of=timezone.now().date())
    assert fact.pk in [f for f, _c, _s in facts_search(query="expense reports paid back", where=then)]


def test_a_deleted_chunk_takes_its_facts_with_it(walk_corpus):
    walk(walk_corpus, ScriptedLLM(structured_replies=two_rounds()))
    chunk_of(walk_corpus, "finance/travel").delete()
    assert list(Fact.objects.for_tenant(walk_corpus).values_list("text", flat=True)) == [EXPENSES_FACT]


@pytest.fixture
def world(db):
    return tenant_world("acme")


def facts_of_every_document(world):
    """The owner (who reads everything) walks once; a fact from each of the three documents."""
    replies = [
        reply(
            ("Public note: patch the tyre with glue.", 1),
            ("Board note: patch the tyre.", 2),
            ("Private note.", 3),
            sufficient=True,
        )
    ]
    run = pipeline_answer(
        AnswerRequest(question="How do I patch a bicycle tyre puncture?", pipeline="walkingrag", k=3),
        tenant=world.tenant,
        llm=ScriptedLLM(structured_replies=replies),
        overrides={"walk_facts_from": 3},
        user=world.users["owner"],
    )
    return run


def test_a_fact_is_visible_only_to_askers_who_may_read_its_document(world):
    facts_of_every_document(world)
    documents = {f.version.document_id for f in Fact.objects.for_tenant(world.tenant).select_related("version")}
    assert documents == {d.pk for d in world.documents.values()}
    for who in ("member", "board", "granted", "owner"):
        where = retrieval_filter(tenant=world.tenant, user=world.users[who])
        seen = {
            Fact.objects.get(pk=f).version.document_id
            for f, _c, _s in facts_search(query="patch tyre note", where=where, embedder=world.tenant.embedder)
        }
        allowed = {world.documents[key].pk for key in world.visible_keys(who)}
        assert seen == allowed, who
