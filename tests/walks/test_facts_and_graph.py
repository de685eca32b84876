"""The facts API, the admin's facts and walk paths, and the graph on a document's page."""

import pytest
from django.contrib.auth.models import Permission
from django.test import Client
from django.urls import reverse

from retrieval.filters import retrieval_filter
from retrieval.pipeline import pipeline_answer
from retrieval.request import AnswerRequest
from retrieval.walks.graph import document_graph, graph_svg
from retrieval.walks.models import Fact
from tests.acl_world import markers, tenant_world
from tests.api.conftest import client_for
from tests.factories import MembershipFactory
from tests.retrieval.doubles import ScriptedLLM
from tests.walks.scripts import EXPENSES_FACT, QUESTION, TRAVEL_FACT, chunk_of, two_rounds


@pytest.fixture
def walked(walk_corpus, member):
    """``member`` walked once: two facts, one from the travel policy, one from the expense reports."""
    pipeline_answer(
        AnswerRequest(question=QUESTION, pipeline="walkingrag", k=1),
        tenant=walk_corpus,
        user=member,
        llm=ScriptedLLM(structured_replies=two_rounds()),
    )
    return walk_corpus


def test_the_facts_api_returns_matching_facts_with_their_chunk_document_version_and_walk(walked, member):
    body = client_for(member).get("/api/v1/facts/", {"q": "receipts thirty days"}).json()
    first = body["results"][0]
    expenses = chunk_of(walked, "finance/expenses")
    assert first["fact"] == EXPENSES_FACT
    assert (first["chunk_id"], first["document"], first["version"], first["round"]) == (
        expenses.pk,
        "finance/expenses",
        expenses.version.number,
        2,
    )
    assert first["walk_id"] and first["trace_id"] and first["asked_by_you"] and first["question"] == QUESTION


def test_other_members_see_the_facts_but_never_whose_question_found_them(walked):
    colleague = MembershipFactory(tenant=walked).user
    results = client_for(colleague).get("/api/v1/facts/").json()["results"]
    assert {r["fact"] for r in results} == {TRAVEL_FACT, EXPENSES_FACT}
    assert all(r["question"] is None and not r["asked_by_you"] for r in results)
    assert QUESTION not in str(results)


def test_another_tenant_sees_none_of_the_facts(walked, other_tenant_corpus):
    stranger = MembershipFactory(tenant=other_tenant_corpus).user
    assert client_for(stranger).get("/api/v1/facts/").json()["results"] == []
    assert client_for(stranger).get("/api/v1/facts/", {"q": "expense reports"}).json()["results"] == []


def test_bad_facts_requests_get_clear_errors(walked, member):
    response = client_for(member).get("/api/v1/facts/", {"limit": 0})
    assert response.status_code == 400


def test_the_graph_links_facts_to_the_walk_query_that_found_them_and_the_fact_that_led_there(walked, member):
    expenses = chunk_of(walked, "finance/expenses").version.document
    graph = document_graph(where=retrieval_filter(tenant=walked, user=member), document_id=expenses.pk, user=member)
    kinds = sorted(node["kind"] for node in graph.nodes.values())
    assert kinds == ["fact", "query"]
    assert {relation for _a, _b, relation in graph.edges} == {"found"}
    svg = graph_svg(graph)
    assert svg.startswith("<svg") and "Expense reports are submitted" in svg and "style=" not in svg


def test_a_documents_page_draws_its_graph_for_members_who_may_read_it(walked, member):
    travel = chunk_of(walked, "finance/travel").version.document
    portal = Client()
    portal.force_login(member)
    page = portal.get(reverse("portal:document", args=[travel.pk])).content.decode()
    assert "What walks found here" in page and "<svg" in page and "Trip costs are paid back" in page


def test_the_graph_never_shows_another_members_question(walked):
    colleague = MembershipFactory(tenant=walked).user
    portal = Client()
    portal.force_login(colleague)
    travel = chunk_of(walked, "finance/travel").version.document
    page = portal.get(reverse("portal:document", args=[travel.pk])).content.decode()
    assert "<svg" in page and QUESTION not in page


def test_facts_of_a_document_one_may_not_read_reach_no_path(db):
    world = tenant_world("acme")
    replies = [
        {
            "facts": [{"fact": f"Note from passage {n}.", "relevance": "", "passage": n} for n in (1, 2, 3)],
            "sufficient": True,
            "missing": [],
        }
    ]
    pipeline_answer(
        AnswerRequest(question="How do I patch a bicycle tyre puncture?", pipeline="walkingrag", k=3),
        tenant=world.tenant,
        llm=ScriptedLLM(structured_replies=replies),
        overrides={"walk_facts_from": 3},
        user=world.users["owner"],
    )
    hidden = [world.documents["board"], world.documents["private"]]
    member = world.users["member"]
    body = client_for(member).get("/api/v1/facts/").content.decode()
    body += client_for(member).get("/api/v1/facts/", {"q": "note passage"}).content.decode()
    portal = Client()
    portal.force_login(member)
    body += portal.get(reverse("portal:document", args=[world.documents["public"].pk])).content.decode()
    hidden_facts = Fact.objects.filter(version__document__in=hidden)
    assert hidden_facts.count() == 2
    for fact in hidden_facts:
        assert fact.text not in body
    for document in hidden:
        for marker in markers(document):
            assert marker not in body


def test_tenant_admins_list_correct_and_retire_facts_and_see_where_walks_go(walked, admin_member):
    admin_member.user_permissions.set(Permission.objects.filter(content_type__app_label="retrieval"))
    site = Client()
    site.force_login(admin_member)
    listing = site.get(reverse("admin:retrieval_fact_changelist")).content.decode()
    assert TRAVEL_FACT in listing and "Walk paths" in listing and QUESTION not in listing
    fact = Fact.objects.get(text=TRAVEL_FACT)
    site.post(reverse("admin:retrieval_fact_changelist"), {"action": "mark_wrong", "_selected_action": [fact.pk]})
    fact.refresh_from_db()
    assert fact.retired_reason == "wrong"
    change = reverse("admin:retrieval_fact_change", args=[fact.pk])
    response = site.post(change, {"text": "Flights are paid back through the expense portal."})
    assert response.status_code == 302
    fact.refresh_from_db()
    assert fact.corrected and fact.text == "Flights are paid back through the expense portal."
    paths = site.get(reverse("admin:retrieval_fact_paths")).content.decode()
    assert "Where walks end" in paths and "Expense reports" in paths and QUESTION not in paths
