"""Summary chunks in retrieval: they compete like any chunk, say they are summaries in results,
citations and the portal, can be kept out per request or per tenant, and evaluation ranks them
as their document."""

import re

import pytest
from django.template.loader import render_to_string
from django.urls import reverse

from knowledge.ingestion.splitters import get_splitter
from knowledge.models import Chunk
from knowledge.services import documents_ingest
from knowledge.summaries.services import summaries_refresh
from quality.services.runs import _judged_ranking
from retrieval.pipeline import pipeline_answer
from retrieval.request import AnswerRequest
from retrieval.search import chunk_search
from tests.api.conftest import client_for
from tests.conftest import BIKE, PASTA, TAXES
from tests.factories import SourceFactory, TenantFactory
from tests.retrieval.doubles import ScriptedLLM

SUMMARIES = {
    "Cooking pasta": "Zanzibar kitchen guide. Bring a large pot of salted water to a rolling boil.",
    "Fixing a flat bicycle tyre": "Repairing a punctured inner tube with glue and a patch.",
    "Expense reports": "Company travel expense rules: deadlines, receipts and approvals.",
}


class PerTitleLLM(ScriptedLLM):
    """Replies with the scripted summary of the document the prompt holds."""

    def chat(self, messages, *, max_tokens=512, temperature=0.0):
        self.chat_reply = SUMMARIES[re.search(r'<document title="([^"]+)">', messages[-1]["content"]).group(1)]
        return super().chat(messages, max_tokens=max_tokens, temperature=temperature)


def summarize(tenant, source):
    documents_ingest(tenant=tenant, source=source, documents=[PASTA, BIKE, TAXES], splitter=get_splitter("sentence"))
    summaries_refresh(tenant_id=tenant.pk, method="llm", llm=PerTitleLLM())
    return tenant


@pytest.fixture
def summarized(tenant, source):
    """The handbook, one chunk per sentence, with the scripted summaries."""
    return summarize(tenant, source)


def kinds(results):
    return [r.as_dict()["kind"] for r in results]


def test_a_summary_competes_in_search_and_says_it_is_a_summary(summarized):
    results = chunk_search(AnswerRequest(question="zanzibar", mode="lexical"), tenant=summarized).results
    top = results[0].as_dict()
    assert top["kind"] == "summary" and top["document"] == "recipes/pasta"
    assert top["text"] == SUMMARIES["Cooking pasta"]
    dense = chunk_search(AnswerRequest(question=SUMMARIES["Expense reports"], mode="dense"), tenant=summarized).results
    assert dense[0].as_dict()["kind"] == "summary" and dense[0].as_dict()["document"] == "finance/expenses"


@pytest.mark.parametrize("mode", ["lexical", "dense", "hybrid"])
def test_the_request_switch_keeps_summaries_out_in_every_mode(summarized, mode):
    query = SUMMARIES["Cooking pasta"]
    assert "summary" in kinds(chunk_search(AnswerRequest(question=query, mode=mode, k=20), tenant=summarized).results)
    without = chunk_search(AnswerRequest(question=query, mode=mode, k=20, summaries=False), tenant=summarized).results
    assert without and set(kinds(without)) == {"body"}


def test_keeping_summaries_out_also_holds_with_a_source_filter(summarized, source):
    results = chunk_search(
        AnswerRequest(question="zanzibar boil", mode="lexical", source_ids=[source.pk], summaries=False),
        tenant=summarized,
    ).results
    assert results and set(kinds(results)) == {"body"}


def test_a_tenant_can_keep_summaries_out_and_a_request_can_bring_them_back(summarized):
    summarized.retrieval_config = {"include_summaries": False}
    summarized.save()
    assert "summary" not in kinds(
        chunk_search(AnswerRequest(question="zanzibar", mode="lexical"), tenant=summarized).results
    )
    back = chunk_search(AnswerRequest(question="zanzibar", mode="lexical", summaries=True), tenant=summarized).results
    assert kinds(back)[0] == "summary"


def test_a_bad_summaries_option_is_a_clear_error(summarized):
    from core.errors import InvalidInput

    with pytest.raises(InvalidInput, match="summaries"):
        chunk_search(AnswerRequest(question="pasta", summaries="no"), tenant=summarized)


def test_another_tenants_summary_is_never_found(summarized):
    other = TenantFactory(slug="other-summaries")
    summarize(other, SourceFactory(tenant=other, name="secret"))
    for mode in ("lexical", "dense", "hybrid"):
        results = chunk_search(
            AnswerRequest(question="zanzibar kitchen guide", mode=mode, k=50), tenant=summarized
        ).results
        assert {r.chunk.tenant_id for r in results} == {summarized.pk}


def test_an_answer_cites_a_summary_as_one_passage_and_the_portal_shows_summary_of(summarized):
    llm = ScriptedLLM(chat_reply="Use a large pot of salted water [1].")
    run = pipeline_answer(
        AnswerRequest(question="zanzibar", strategy="window"),
        tenant=summarized,
        llm=llm,
        overrides={"mode": "lexical"},
        trace=False,
    )
    cited = run.answer.as_dict()["citations"][0]
    assert cited["kind"] == "summary" and cited["document"] == "recipes/pasta"
    assert cited["text"] == SUMMARIES["Cooking pasta"]  # a window never widens a summary into the body
    from portal.views import answer_context

    html = render_to_string("portal/_answer.html", answer_context(run.as_dict(), can_participate=False))
    assert "Summary of Cooking pasta" in html


def test_the_document_page_shows_the_summary_first(client, summarized, member):
    client.force_login(member)
    document = Chunk.objects.for_tenant(summarized).get(kind="summary", heading="Cooking pasta").version.document
    html = client.get(reverse("portal:document", args=[document.pk])).content.decode()
    assert html.index("Summary of Cooking pasta") < html.index("#0<")
    assert SUMMARIES["Cooking pasta"] in html


def test_the_search_api_says_which_results_are_summaries_and_takes_the_switch(summarized, member):
    api = client_for(member)
    response = api.post("/api/v1/search/", {"query": "zanzibar", "mode": "lexical"}, format="json")
    assert response.status_code == 200
    assert response.json()["results"][0]["kind"] == "summary"
    response = api.post("/api/v1/search/", {"query": "zanzibar boil", "summaries": False}, format="json")
    assert {r["kind"] for r in response.json()["results"]} == {"body"}


def test_evaluation_ranks_a_summary_as_its_document_and_never_as_a_judged_passage(summarized):
    results = chunk_search(
        AnswerRequest(question="zanzibar rolling boil", mode="lexical", k=10), tenant=summarized
    ).results
    assert kinds(results)[0] == "summary"
    ranking, grades, _ = _judged_ranking(results, [{"document": "recipes/pasta", "grade": 1}], {})
    assert ranking[0] == "recipes/pasta"
    sentence = "Bring a large pot of salted water to a rolling boil."
    ranking, grades, top = _judged_ranking(results, [{"document": "recipes/pasta", "text": sentence, "grade": 1}], {})
    assert ranking[0].startswith("chunk:") and ranking[1] == "text:0"  # the body sentence, not the summary
    assert top[0] == "recipes/pasta#summary"


def test_a_restricted_documents_summary_never_reaches_an_outsider_with_or_without_summaries(summarized, member):
    from knowledge.access import access_rule_grant
    from knowledge.models import Document
    from tests.factories import MembershipFactory

    insider = MembershipFactory(tenant=summarized).user
    pasta = Document.objects.for_tenant(summarized).get(external_id="recipes/pasta")
    access_rule_grant(tenant=summarized, document=pasta, user=insider)
    for switch in (None, False):
        for mode in ("lexical", "dense", "hybrid"):
            results = chunk_search(
                AnswerRequest(question="zanzibar kitchen guide", mode=mode, summaries=switch),
                tenant=summarized,
                user=member,
            ).results
            assert "recipes/pasta" not in {r.as_dict()["document"] for r in results}
            if switch is False:
                assert set(kinds(results)) <= {"body"}
    seen = chunk_search(AnswerRequest(question="zanzibar", mode="lexical"), tenant=summarized, user=insider).results
    assert kinds(seen)[0] == "summary"
