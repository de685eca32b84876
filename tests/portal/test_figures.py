"""Figures beside an answer's citations: a PDF with a captioned chart is ingested (the real PDF
reader, its original kept), an answer citing the chart's passage shows the chart's thumbnail with
its caption, and the thumbnail's URL gives a PNG cropped from the page to a member who may see the
document, and a 404 to anyone else. A cited passage without a figure shows none.
"""

from __future__ import annotations

import io
import re

import pytest
from django.urls import reverse
from PIL import Image

from knowledge.access import access_rule_grant
from knowledge.figures import MAX_BYTES, MAX_SIDE_PX, figure_path
from knowledge.ingestion.readers import read_bytes
from knowledge.models import Document
from knowledge.services import documents_ingest
from tests.factories import MembershipFactory, SourceFactory

ASK = reverse("portal:ask")
CAPTION = "Figure 1: Lighthouse beam hours per season"
QUESTION = "How many lighthouse beam hours per season?"


def lighthouse_pdf() -> bytes:
    """One letter page: two lines about the lighthouse beam, a bar chart (a picture, red bars on
    white, 480 x 240 points with its top 100 points below the page's top) with ``CAPTION`` under
    it, and a closing line."""
    from reportlab.lib.pagesizes import letter
    from reportlab.lib.utils import ImageReader
    from reportlab.pdfgen import canvas

    chart = Image.new("RGB", (600, 300), "white")
    for number, height in enumerate((120, 220, 160, 260)):
        chart.paste((200, 30, 30), (60 + number * 130, 280 - height, 140 + number * 130, 280))
    png = io.BytesIO()
    chart.save(png, format="PNG")
    png.seek(0)
    out = io.BytesIO()
    width, height = letter
    pdf = canvas.Canvas(out, pagesize=letter)
    pdf.setFont("Helvetica", 11)
    pdf.drawString(72, height - 60, "Lighthouse beam hours per season are charted below.")
    pdf.drawString(72, height - 75, "The lighthouse beam runs longest in winter.")
    pdf.drawImage(ImageReader(png), 72, height - 100 - 240, width=480, height=240)
    pdf.setFont("Helvetica", 10)
    pdf.drawString(72, height - 100 - 240 - 20, CAPTION)
    pdf.setFont("Helvetica", 11)
    pdf.drawString(72, height - 420, "Keepers log the lighthouse beam hours each night.")
    pdf.showPage()
    pdf.save()
    return out.getvalue()


@pytest.fixture(autouse=True)
def data_dir(settings, tmp_path):
    """Originals (and figures' pictures) are written under a temporary KB_DATA_DIR."""
    settings.KB_DATA_DIR = tmp_path / "data"
    return settings.KB_DATA_DIR


@pytest.fixture
def lighthouse(corpus, django_capture_on_commit_callbacks):
    """The lighthouse report read by the PDF reader and ingested into the corpus tenant, its
    original written (on commit)."""
    with django_capture_on_commit_callbacks(execute=True):
        documents_ingest(
            tenant=corpus,
            source=SourceFactory(tenant=corpus, name="reports"),
            documents=read_bytes(lighthouse_pdf(), name="reports/lighthouse.pdf"),
        )
    return Document.objects.for_tenant(corpus).get(external_id="reports/lighthouse.pdf")


def figure_url(document, number: int = 1, index: int = 0) -> str:
    return reverse("portal:document-figure", args=[document.pk, number, index])


def citation_items(html: str) -> dict[int, str]:
    """Each citation's ``<li>`` markup in an answer page, by its number."""
    return {int(n): item for n, item in re.findall(r'<li value="(\d+)" id="citation-\d+">(.*?)</li>', html, re.S)}


def test_the_reader_records_the_charts_caption_and_box(lighthouse):
    [figure] = lighthouse.metadata["figures"]
    assert figure["caption"] == CAPTION and figure["page"] == 1
    assert figure["bbox"] == [72.0, 100.0, 552.0, 340.0]


def test_an_answer_citing_the_charts_passage_shows_its_thumbnail_with_caption_linking_to_the_viewer(
    client, lighthouse, member
):
    client.force_login(member)
    response = client.post(ASK, {"question": QUESTION})
    cited = next(c for c in response.context["citations"] if c["document_id"] == lighthouse.pk)
    item = citation_items(response.content.decode())[cited["n"]]
    url = figure_url(lighthouse)
    assert f'<img src="{url}" alt="{CAPTION}" width="160" height="80">' in item
    assert f"{CAPTION} · p. 1" in item
    viewer = f"{reverse('portal:document-view', args=[lighthouse.pk])}?version=1&amp;chunk={cited['chunk']}"
    assert f'<a href="{viewer}"><img' in item


def test_the_thumbnail_is_a_png_of_the_chart_cropped_from_its_page(client, lighthouse, member):
    client.force_login(member)
    response = client.get(figure_url(lighthouse))
    assert response.status_code == 200
    assert response["Content-Type"] == "image/png" and response["X-Content-Type-Options"] == "nosniff"
    assert "private" in response["Cache-Control"] and "max-age=3600" in response["Cache-Control"]
    assert len(response.content) <= MAX_BYTES
    picture = Image.open(io.BytesIO(response.content)).convert("RGB")
    width, height = picture.size  # 480 x 240 points, its longer side capped (pdfium rounds down)
    assert width == MAX_SIDE_PX and MAX_SIDE_PX // 2 - 1 <= height <= MAX_SIDE_PX // 2
    reds = sum(1 for r, g, b in picture.getdata() if r > 150 and g < 90 and b < 90)
    assert reds > picture.size[0] * picture.size[1] // 10  # the bars, not the page's text
    corner = picture.getpixel((2, 2))
    assert min(corner) > 230  # white around the bars: the crop is the chart's box


def test_the_picture_is_kept_once_rendered_and_a_browser_holding_it_gets_a_304(client, lighthouse, member):
    client.force_login(member)
    first = client.get(figure_url(lighthouse))
    kept = figure_path(tenant_id=lighthouse.tenant_id, document_id=lighthouse.pk, number=1, index=0)
    assert kept.read_bytes() == first.content
    again = client.get(figure_url(lighthouse), HTTP_IF_NONE_MATCH=first["ETag"])
    assert again.status_code == 304 and again["ETag"] == first["ETag"]


def test_a_member_the_rules_hide_the_document_from_gets_a_404(client, corpus, lighthouse, member):
    reader = MembershipFactory(tenant=corpus).user
    access_rule_grant(tenant=corpus, document=lighthouse, user=reader)  # restricted to the reader
    client.force_login(member)
    assert client.get(figure_url(lighthouse)).status_code == 404
    response = client.post(ASK, {"question": QUESTION})
    assert "citation-figure" not in response.content.decode()  # nor is it cited to them
    client.force_login(reader)
    assert client.get(figure_url(lighthouse)).status_code == 200


def test_another_tenants_member_gets_a_404(client, lighthouse, other_tenant_corpus):
    client.force_login(MembershipFactory(tenant=other_tenant_corpus).user)
    assert client.get(figure_url(lighthouse)).status_code == 404


def test_a_figure_or_version_the_document_does_not_have_is_a_404(client, lighthouse, member):
    client.force_login(member)
    assert client.get(figure_url(lighthouse, index=1)).status_code == 404
    assert client.get(figure_url(lighthouse, number=2)).status_code == 404


def test_a_cited_passage_without_a_figure_shows_none(client, lighthouse, member):
    client.force_login(member)
    response = client.post(ASK, {"question": "How do I fix a flat bicycle tyre?"})
    items = citation_items(response.content.decode())
    assert items and all(c["document_id"] != lighthouse.pk for c in response.context["citations"])
    assert not any("<figure" in item or "<img" in item for item in items.values())
