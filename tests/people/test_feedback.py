"""Feedback on answers and citations: the service, the API, the portal forms, the admin and trends."""

import re

import pytest
from django.contrib.auth.models import Permission
from django.urls import reverse

from core.errors import InvalidInput, NotFound
from knowledge.models import Document
from people.feedback import feedback_give, feedback_trends
from people.models import Feedback
from retrieval.pipeline import pipeline_answer
from retrieval.request import AnswerRequest
from tests.api.conftest import client_for
from tests.factories import MembershipFactory

QUESTION = "How long should spaghetti boil?"


@pytest.fixture
def answered(corpus, member):
    """A real answer of the corpus tenant to ``member``, traced, with its citations."""
    run = pipeline_answer(AnswerRequest(question=QUESTION), tenant=corpus, user=member, trace=True)
    assert run.trace_id and run.answer.citations
    return run


def test_an_answers_trace_records_which_document_and_source_each_citation_cites(answered, corpus):
    from retrieval.models import Trace

    trace = Trace.objects.get(pk=answered.trace_id)
    first = answered.answer.citations[0]
    assert trace.citations[0] == {
        "n": first.n,
        "chunk_id": first.passage.anchor.pk,
        "document_id": first.passage.document.pk,
        "source_id": first.passage.document.source_id,
    }


def test_feedback_on_a_citation_is_credited_to_the_cited_document_and_source(answered, corpus, member):
    cited = answered.answer.citations[0]
    feedback = feedback_give(
        tenant=corpus, user=member, trace_id=answered.trace_id, rating="down", citation=cited.n, comment="Outdated"
    )
    assert feedback.rating == Feedback.Rating.DOWN
    assert feedback.document_id == cited.passage.document.pk
    assert feedback.source.name == "handbook"
    assert feedback.comment == "Outdated"


def test_giving_feedback_again_replaces_the_earlier_one(answered, corpus, member):
    feedback_give(tenant=corpus, user=member, trace_id=answered.trace_id, rating="up")
    feedback_give(tenant=corpus, user=member, trace_id=answered.trace_id, rating="down", comment="Too vague")
    only = Feedback.objects.get()
    assert (only.rating, only.comment, only.citation) == (-1, "Too vague", None)


def test_feedback_on_the_answer_and_on_a_citation_are_kept_apart(answered, corpus, member):
    feedback_give(tenant=corpus, user=member, trace_id=answered.trace_id, rating="up")
    feedback_give(tenant=corpus, user=member, trace_id=answered.trace_id, rating="down", citation=1)
    assert set(Feedback.objects.values_list("citation", "rating")) == {(1, -1), (None, 1)}


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        ({"rating": "meh"}, "rating must be 'up' or 'down'"),
        ({"rating": "up", "citation": 99}, "no citation [99]"),
        ({"rating": "up", "comment": "x" * 2001}, "limit is 2000"),
        ({"rating": "up", "comment": "bad\x00byte"}, "NUL"),
    ],
)
def test_bad_feedback_is_refused_with_a_message_and_nothing_is_stored(answered, corpus, member, arguments, message):
    with pytest.raises(InvalidInput, match=message.replace("[", r"\[")):
        feedback_give(tenant=corpus, user=member, trace_id=answered.trace_id, **arguments)
    assert not Feedback.objects.exists()


def test_feedback_on_another_tenants_answer_is_not_found(answered, other_tenant_corpus):
    stranger = MembershipFactory(tenant=other_tenant_corpus).user
    with pytest.raises(NotFound):
        feedback_give(tenant=other_tenant_corpus, user=stranger, trace_id=answered.trace_id, rating="down")
    assert not Feedback.objects.exists()


def test_trends_give_the_negative_share_per_pipeline_and_per_cited_source(answered, corpus, member):
    colleague = MembershipFactory(tenant=corpus).user
    feedback_give(tenant=corpus, user=member, trace_id=answered.trace_id, rating="down", citation=1)
    feedback_give(tenant=corpus, user=colleague, trace_id=answered.trace_id, rating="up", citation=1)
    feedback_give(tenant=corpus, user=colleague, trace_id=answered.trace_id, rating="down")

    [pipeline_row] = feedback_trends(tenant=corpus, by="pipeline")
    assert (pipeline_row.key, pipeline_row.total, pipeline_row.negative) == (answered.pipeline, 3, 2)
    [source_row] = feedback_trends(tenant=corpus, by="source")
    assert (source_row.key, source_row.total, source_row.negative_share) == ("handbook", 2, 0.5)


def test_a_cited_documents_deletion_keeps_its_feedback_in_the_figures(answered, corpus, member):
    feedback_give(tenant=corpus, user=member, trace_id=answered.trace_id, rating="down", citation=1)
    Document.objects.filter(pk=answered.answer.citations[0].passage.document.pk).delete()
    assert Feedback.objects.get().document is None
    assert feedback_trends(tenant=corpus, by="pipeline")[0].negative == 1


# --- API ---------------------------------------------------------------------------------------


def test_the_api_takes_feedback_on_a_citation_and_returns_it(answered, member):
    url = reverse("api:trace-feedback", args=[answered.trace_id])
    response = client_for(member).post(url, {"rating": "up", "citation": 1, "comment": "Spot on"}, format="json")
    assert response.status_code == 201, response.content
    assert response.json()["rating"] == "up"
    assert response.json()["citation"] == 1
    assert Feedback.objects.get().comment == "Spot on"


def test_the_api_refuses_a_bad_rating_with_a_400(answered, member):
    url = reverse("api:trace-feedback", args=[answered.trace_id])
    response = client_for(member).post(url, {"rating": "sideways"}, format="json")
    assert response.status_code == 400
    assert "rating" in response.content.decode()


def test_the_api_answers_404_for_another_tenants_trace(answered, other_tenant_corpus):
    stranger = MembershipFactory(tenant=other_tenant_corpus).user
    url = reverse("api:trace-feedback", args=[answered.trace_id])
    response = client_for(stranger).post(url, {"rating": "down"}, format="json")
    assert response.status_code == 404
    assert not Feedback.objects.exists()


# --- portal ------------------------------------------------------------------------------------


def test_the_portals_answer_offers_feedback_on_the_answer_and_each_citation(client, corpus, member):
    client.force_login(member)
    page = client.post(reverse("portal:ask"), {"question": QUESTION}).content.decode()
    assert page.count('class="feedback"') >= 2  # the answer's form and at least one citation's
    assert 'name="citation" value="1"' in page
    assert 'hx-post="/feedback/"' in page  # htmx posts them in place
    assert "django_htmx/htmx-2.min.js" in page


def test_an_htmx_feedback_post_gets_its_form_back_with_the_rating_pressed(client, answered, member):
    client.force_login(member)
    response = client.post(
        reverse("portal:feedback"),
        {"trace": answered.trace_id, "rating": "down", "comment": "Missing the salt step"},
        HTTP_HX_REQUEST="true",
    )
    assert response.status_code == 200
    html = response.content.decode()
    assert html.lstrip().startswith("<form") and "<html" not in html  # the fragment htmx swaps in
    assert f'id="feedback-{answered.trace_id}-answer"' in html
    assert re.search(r'value="down"[^>]*aria-pressed="true"', html)
    assert "Thanks for your feedback." in html and 'value="Missing the salt step"' in html
    assert "HX-Request" in response["Vary"]
    assert Feedback.objects.get().comment == "Missing the salt step"


def test_a_plain_feedback_post_gets_a_thank_you_page(client, answered, member):
    client.force_login(member)
    response = client.post(reverse("portal:feedback"), {"trace": answered.trace_id, "rating": "up"})
    assert response.status_code == 200
    assert "Thanks for your feedback." in response.content.decode()


def test_the_portal_refuses_feedback_on_a_citation_the_answer_lacks(client, answered, member):
    client.force_login(member)
    response = client.post(
        reverse("portal:feedback"),
        {"trace": answered.trace_id, "rating": "up", "citation": 42},
        HTTP_HX_REQUEST="true",
    )
    assert response.status_code == 400  # htmx swaps it in too (responseHandling in base.html)
    assert "no citation [42]" in response.content.decode()
    assert 'class="feedback-status muted errorlist"' in response.content.decode()
    assert not Feedback.objects.exists()


# --- admin -------------------------------------------------------------------------------------


@pytest.fixture
def feedback_admin_client(client, admin_member):
    admin_member.user_permissions.add(Permission.objects.get(codename="view_feedback"))
    client.force_login(admin_member)
    return client


def test_a_tenant_admin_lists_their_tenants_feedback_only(
    feedback_admin_client, answered, corpus, member, other_tenant_corpus
):
    feedback_give(tenant=corpus, user=member, trace_id=answered.trace_id, rating="down", comment="Ours")
    theirs = pipeline_answer(AnswerRequest(question="bicycle tyre puncture"), tenant=other_tenant_corpus, trace=True)
    stranger = MembershipFactory(tenant=other_tenant_corpus).user
    feedback_give(tenant=other_tenant_corpus, user=stranger, trace_id=theirs.trace_id, rating="down", comment="Theirs")

    page = feedback_admin_client.get(reverse("admin:people_feedback_changelist")).content.decode()
    assert "Ours" in page
    assert "Theirs" not in page


def test_the_trends_page_shows_the_negative_share_per_pipeline_and_source(
    feedback_admin_client, answered, corpus, member
):
    feedback_give(tenant=corpus, user=member, trace_id=answered.trace_id, rating="down", citation=1)
    page = feedback_admin_client.get(reverse("admin:people_feedback_trends")).content.decode()
    assert "Per pipeline" in page and "Per source" in page
    assert "handbook" in page
    assert "100 %" in page
