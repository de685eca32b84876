"""Figures in the MCP ``ask`` tool's answer: a citation of a passage holding a PDF's chart carries
the chart (index, caption, page and the URL of its picture), and the member's MCP token, sent as
MCP clients send it (``Bearer``), gets the picture from that URL; a citation without a figure
carries ``[]``.
"""

from __future__ import annotations

import pytest
from django.test import Client

from core.memberships import membership_token_create
from core.models import Membership
from knowledge.ingestion.readers import read_bytes
from knowledge.models import Document
from knowledge.services import documents_ingest
from mcp_server.tools import AskArguments, ask_run
from tests.factories import SourceFactory
from tests.portal.test_figures import CAPTION, QUESTION, lighthouse_pdf


@pytest.fixture(autouse=True)
def data_dir(settings, tmp_path):
    """Originals (and figures' pictures) are written under a temporary KB_DATA_DIR."""
    settings.KB_DATA_DIR = tmp_path / "data"
    return settings.KB_DATA_DIR


@pytest.fixture
def lighthouse(corpus, django_capture_on_commit_callbacks):
    """The lighthouse report (a captioned bar chart) ingested into the corpus tenant, its original kept."""
    with django_capture_on_commit_callbacks(execute=True):
        documents_ingest(
            tenant=corpus,
            source=SourceFactory(tenant=corpus, name="reports"),
            documents=read_bytes(lighthouse_pdf(), name="reports/lighthouse.pdf"),
        )
    return Document.objects.for_tenant(corpus).get(external_id="reports/lighthouse.pdf")


@pytest.fixture
def membership(corpus, member):
    return Membership.objects.get(tenant=corpus, user=member)


def test_the_ask_tools_citation_of_the_chart_carries_it_and_the_mcp_token_gets_its_picture(lighthouse, membership):
    answer = ask_run(membership=membership, arguments=AskArguments(question=QUESTION, extractive=True))
    citation = next(c for c in answer["citations"] if c["document_id"] == lighthouse.pk)
    url = f"/api/v1/documents/{lighthouse.pk}/versions/1/figures/0.png"
    assert citation["figures"] == [{"index": 0, "caption": CAPTION, "page": 1, "url": url}]

    key = membership_token_create(membership=membership, name="mcp figures")[1]
    response = Client().get(url, HTTP_AUTHORIZATION=f"Bearer {key}")
    assert response.status_code == 200 and response["Content-Type"] == "image/png"
    assert response.content.startswith(b"\x89PNG")


def test_the_ask_tools_citation_without_a_figure_carries_an_empty_list(lighthouse, membership):
    answer = ask_run(
        membership=membership, arguments=AskArguments(question="How do I fix a flat bicycle tyre?", extractive=True)
    )
    assert answer["citations"] and all(c["figures"] == [] for c in answer["citations"])
