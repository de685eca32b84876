"""Figures in the REST API's answers: a citation of a passage holding a PDF's chart carries the
chart (index, caption, page and the API URL of its picture), and that URL gives the PNG to a
member's token, and a 404 to another tenant's. A citation without a figure carries ``[]``;
``manage.py ask --json`` and the stream's answer event carry the same figures.
"""

from __future__ import annotations

import io
import json

import pytest
from django.core.management import call_command
from django.urls import reverse
from PIL import Image
from rest_framework.test import APIClient

from core.memberships import membership_token_create
from core.models import Membership
from knowledge.figures import MAX_SIDE_PX
from knowledge.ingestion.readers import read_bytes
from knowledge.models import Document
from knowledge.services import documents_ingest
from tests.api.test_ask_stream import sse_events
from tests.factories import SourceFactory
from tests.portal.test_figures import CAPTION, QUESTION, lighthouse_pdf

ASK = "/api/v1/ask/"


@pytest.fixture
def lighthouse(corpus, django_capture_on_commit_callbacks):
    """The lighthouse report (one page, a captioned bar chart) read by the PDF reader and ingested
    into the corpus tenant, its original kept (on commit)."""
    with django_capture_on_commit_callbacks(execute=True):
        documents_ingest(
            tenant=corpus,
            source=SourceFactory(tenant=corpus, name="reports"),
            documents=read_bytes(lighthouse_pdf(), name="reports/lighthouse.pdf"),
        )
    return Document.objects.for_tenant(corpus).get(external_id="reports/lighthouse.pdf")


def picture_url(document, number: int = 1, index: int = 0) -> str:
    return f"/api/v1/documents/{document.pk}/versions/{number}/figures/{index}.png"


def chart(document) -> list[dict]:
    """The figures a citation of the lighthouse report's chart passage should carry."""
    return [{"index": 0, "caption": CAPTION, "page": 1, "url": picture_url(document)}]


def cited(citations: list[dict], document) -> dict:
    return next(c for c in citations if c["document_id"] == document.pk)


def assert_is_the_chart(response) -> None:
    assert response.status_code == 200
    assert response["Content-Type"] == "image/png" and response["X-Content-Type-Options"] == "nosniff"
    assert "private" in response["Cache-Control"]
    picture = Image.open(io.BytesIO(response.content))
    assert picture.format == "PNG" and picture.size[0] == MAX_SIDE_PX


def test_the_picture_url_is_the_apis_named_route(lighthouse):
    assert reverse("api:document-figure", args=[lighthouse.pk, 1, 0]) == picture_url(lighthouse)


def test_an_answer_citing_the_charts_passage_carries_the_chart_with_the_api_url_of_its_picture(
    lighthouse, member_client
):
    response = member_client.post(ASK, {"question": QUESTION, "extractive": True}, format="json")
    assert response.status_code == 200
    assert cited(response.json()["citations"], lighthouse)["figures"] == chart(lighthouse)


def test_the_pictures_url_gives_the_png_to_the_members_token(lighthouse, member_client):
    assert_is_the_chart(member_client.get(picture_url(lighthouse), HTTP_ACCEPT="image/png"))


def test_the_pictures_url_is_a_404_to_another_tenants_token_and_a_401_without_one(lighthouse, other_admin_client):
    response = other_admin_client.get(picture_url(lighthouse))
    assert response.status_code == 404 and response.json()["error"]["code"] == "not_found"
    assert APIClient().get(picture_url(lighthouse)).status_code == 401


def test_a_figure_or_version_the_document_does_not_have_is_a_404(lighthouse, member_client):
    assert member_client.get(picture_url(lighthouse, index=1)).status_code == 404
    assert member_client.get(picture_url(lighthouse, number=2)).status_code == 404


def test_a_membership_token_sent_as_bearer_gets_the_picture_as_mcp_clients_send_it(corpus, lighthouse, member):
    key = membership_token_create(membership=Membership.objects.get(tenant=corpus, user=member), name="figures")[1]
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {key}")
    first = client.get(picture_url(lighthouse))
    assert_is_the_chart(first)
    again = client.get(picture_url(lighthouse), HTTP_IF_NONE_MATCH=first["ETag"])
    assert again.status_code == 304


def test_a_citation_without_a_figure_carries_an_empty_list(lighthouse, member_client):
    response = member_client.post(
        ASK, {"question": "How do I fix a flat bicycle tyre?", "extractive": True}, format="json"
    )
    citations = response.json()["citations"]
    assert citations and all(c["figures"] == [] for c in citations)


def test_manage_py_ask_json_carries_the_chart(corpus, lighthouse):
    out = io.StringIO()
    call_command("ask", QUESTION, "--tenant", corpus.slug, "--extractive", "--json", stdout=out)
    assert cited(json.loads(out.getvalue())["citations"], lighthouse)["figures"] == chart(lighthouse)


@pytest.mark.usefixtures("transactional_db")
def test_the_streams_answer_event_carries_the_chart(lighthouse, member_client):
    response = member_client.post(
        "/api/v1/ask/stream/",
        {"question": QUESTION, "extractive": True},
        format="json",
        HTTP_ACCEPT="text/event-stream",
    )
    answer = next(data for event, data in sse_events(response) if event == "answer")
    assert cited(answer["citations"], lighthouse)["figures"] == chart(lighthouse)


def test_the_openapi_schema_documents_a_citations_figures(member_client):
    schema = member_client.get("/api/schema/?format=json").json()
    components = schema["components"]["schemas"]
    assert components["Citation"]["properties"]["figures"]["items"] == {"$ref": "#/components/schemas/CitationFigure"}
    figure = components["CitationFigure"]
    assert set(figure["properties"]) == {"index", "caption", "page", "url"}
    assert figure["properties"]["page"]["nullable"] is True
    picture = schema["paths"]["/api/v1/documents/{document_id}/versions/{number}/figures/{index}.png"]["get"]
    assert set(picture["responses"]["200"]["content"]) == {"image/png"}
