"""Pictures of office files beside an answer's citations: a .docx with a captioned chart and a
.pptx slide with a picture are ingested (the real readers, in the parse sandbox), their pictures
are kept as PNGs beside the originals and counted in the stored bytes, an answer citing the
picture's passage shows its thumbnail, whose URL gives the PNG to a member who may see the
document and a 404 to anyone else, and deleting the document removes the picture.
"""

from __future__ import annotations

import io
import re

import pytest
from django.urls import reverse
from PIL import Image, ImageDraw

from knowledge.access import access_rule_grant
from knowledge.figures import MAX_BYTES, MAX_SIDE_PX, figure_path
from knowledge.ingestion.office_images import MAX_PICTURES
from knowledge.ingestion.readers import read_bytes
from knowledge.models import Document, DocumentVersion
from knowledge.quotas.usage import usage_count
from knowledge.services import document_delete, documents_ingest
from tests.factories import MembershipFactory, SourceFactory

ASK = reverse("portal:ask")
CAPTION = "Figure 1: Greenhouse watering litres per bed"
ALT = "Bar chart of greenhouse watering"
QUESTION = "How many litres of greenhouse watering per bed?"


@pytest.fixture(autouse=True)
def no_ocr(settings, tmp_path):
    """Pictures keep their alternative text (no OCR engine needed); files go to a temporary
    KB_DATA_DIR."""
    settings.KB_OCR_ENGINE = "off"
    settings.KB_DATA_DIR = tmp_path / "data"


def chart_png(size: tuple[int, int] = (1200, 600)) -> bytes:
    """Green bars on white, as a chart pasted into a report."""
    chart = Image.new("RGB", size, "white")
    draw = ImageDraw.Draw(chart)
    for number, height in enumerate((200, 380, 280, 460)):
        draw.rectangle((100 + number * 260, 560 - height, 260 + number * 260, 560), fill=(30, 160, 40))
    out = io.BytesIO()
    chart.save(out, format="PNG")
    return out.getvalue()


def greenhouse_docx(*, pictures: int = 1) -> bytes:
    """A report: two sentences on greenhouse watering, the chart (alternative text ``ALT``) with
    the caption paragraph ``CAPTION`` (Word's "Caption" style) under it, and a closing sentence;
    ``pictures`` copies of the chart."""
    import docx
    from docx.shared import Inches

    document = docx.Document()
    document.add_paragraph("Greenhouse watering litres per bed are charted below.")
    document.add_paragraph("Each greenhouse bed gets its watering at dawn.")
    for _ in range(pictures):
        document.add_picture(io.BytesIO(chart_png()), width=Inches(5))
    for description in document.element.body.xpath(".//wp:docPr"):
        description.set("descr", ALT)
    document.add_paragraph(CAPTION, style="Caption")
    document.add_paragraph("Gardeners log the greenhouse watering each morning.")
    out = io.BytesIO()
    document.save(out)
    return out.getvalue()


def harbour_pptx() -> bytes:
    """Two slides: a title slide, and a slide titled "Harbour crane loads" holding a picture
    described as "Harbour crane loads per quarter"."""
    from pptx import Presentation
    from pptx.util import Inches

    presentation = Presentation()
    presentation.slides.add_slide(presentation.slide_layouts[0]).shapes.title.text = "Port review"
    slide = presentation.slides.add_slide(presentation.slide_layouts[5])
    slide.shapes.title.text = "Harbour crane loads"
    picture = slide.shapes.add_picture(io.BytesIO(chart_png((800, 800))), Inches(1), Inches(1.5), Inches(4))
    picture._element.nvPicPr.cNvPr.set("descr", "Harbour crane loads per quarter")
    out = io.BytesIO()
    presentation.save(out)
    return out.getvalue()


def ingest(tenant, data: bytes, name: str, capture) -> Document:
    with capture(execute=True):
        documents_ingest(
            tenant=tenant,
            source=SourceFactory(tenant=tenant, name="reports"),
            documents=read_bytes(data, name=name),
        )
    return Document.objects.for_tenant(tenant).get(external_id=name)


@pytest.fixture
def greenhouse(corpus, django_capture_on_commit_callbacks):
    return ingest(corpus, greenhouse_docx(), "reports/greenhouse.docx", django_capture_on_commit_callbacks)


def figure_url(document, number: int = 1, index: int = 0) -> str:
    return reverse("portal:document-figure", args=[document.pk, number, index])


def citation_items(html: str) -> dict[int, str]:
    """Each citation's ``<li>`` markup in an answer page, by its number."""
    return {int(n): item for n, item in re.findall(r'<li value="(\d+)" id="citation-\d+">(.*?)</li>', html, re.S)}


def test_the_docx_reader_keeps_the_picture_with_its_caption_paragraph_at_its_line():
    [read] = read_bytes(greenhouse_docx(), name="greenhouse.docx")
    [figure] = read.metadata["figures"]
    assert figure["caption"] == CAPTION and figure["page"] is None and figure["index"] == 0
    assert read.text[figure["start"] : figure["end"]] == f"[Image: {ALT}]" == figure["marker"]
    assert f"[Image: {ALT}]\n\n{CAPTION}" in read.text  # the text is as before: the caption stays
    [png] = read.images
    picture = Image.open(io.BytesIO(png))
    assert picture.format == "PNG" and picture.size == (MAX_SIDE_PX, MAX_SIDE_PX // 2) == (
        figure["width"],
        figure["height"],
    )
    assert len(png) <= MAX_BYTES


def test_a_document_keeps_at_most_max_pictures_and_the_rest_keep_their_text(settings):
    [read] = read_bytes(greenhouse_docx(pictures=MAX_PICTURES + 2), name="many.docx")
    assert len(read.images) == len(read.metadata["figures"]) == MAX_PICTURES
    assert read.text.count(f"[Image: {ALT}]") == MAX_PICTURES + 2


def test_an_odt_picture_keeps_its_figure_caption_and_is_shown_over_white(tmp_path):
    from odf.draw import Frame
    from odf.draw import Image as FrameImage
    from odf.opendocument import OpenDocumentText
    from odf.svg import Title
    from odf.text import P, Sequence

    document = OpenDocumentText()
    document.text.addElement(P(text="The floor plan:"))
    transparent = io.BytesIO()
    Image.new("RGBA", (900, 300), (0, 0, 0, 0)).save(transparent, format="PNG")
    frame = Frame(width="8cm", height="2cm", anchortype="as-char")
    frame.addElement(FrameImage(href=document.addPicture("plan.png", "image/png", transparent.getvalue())))
    frame.addElement(Title(text="Floor plan"))
    paragraph = P()
    paragraph.addElement(frame)
    document.text.addElement(paragraph)
    caption = P(text="Figure ")
    caption.addElement(Sequence(name="Figure", text="1"))
    caption.addText(": Second floor plan")
    document.text.addElement(caption)
    document.save(str(tmp_path / "plan.odt"))
    [read] = read_bytes((tmp_path / "plan.odt").read_bytes(), name="plan.odt")
    [figure] = read.metadata["figures"]
    assert figure["caption"] == "Figure 1: Second floor plan" and figure["marker"] == "[Image: Floor plan]"
    assert Image.open(io.BytesIO(read.images[0])).getpixel((1, 1)) == (255, 255, 255)


def test_the_picture_is_stored_beside_the_originals_and_counted_in_the_stored_bytes(greenhouse):
    version = DocumentVersion.objects.get(document=greenhouse, is_current=True)
    kept = figure_path(tenant_id=greenhouse.tenant_id, document_id=greenhouse.pk, number=1, index=0)
    assert kept.is_file() and version.original_bytes == kept.stat().st_size > 0
    versions = DocumentVersion.objects.for_tenant(greenhouse.tenant)
    texts = sum(len(v.text.encode()) for v in versions)
    assert usage_count(tenant=greenhouse.tenant, names=["stored_bytes"])["stored_bytes"] == texts + kept.stat().st_size


def test_an_answer_citing_the_pictures_passage_shows_its_thumbnail_linking_to_the_document_page(
    client, greenhouse, member
):
    client.force_login(member)
    response = client.post(ASK, {"question": QUESTION})
    cited = next(c for c in response.context["citations"] if c["document_id"] == greenhouse.pk)
    item = citation_items(response.content.decode())[cited["n"]]
    url = figure_url(greenhouse)
    assert f'<img src="{url}" alt="{CAPTION}" width="160" height="80">' in item
    assert f'<figcaption class="muted">{CAPTION}</figcaption>' in item  # no page in a .docx
    page = f"{reverse('portal:document', args=[greenhouse.pk])}?version=1#chunk-{cited['chunk']}"
    assert f'<a href="{page}"><img' in item
    picture = client.get(url)
    assert picture.status_code == 200 and picture["Content-Type"] == "image/png"
    assert Image.open(io.BytesIO(picture.content)).getpixel((2, 2)) == (255, 255, 255)


def test_a_pptx_slides_picture_is_shown_with_its_slide(client, corpus, member, django_capture_on_commit_callbacks):
    deck = ingest(corpus, harbour_pptx(), "reports/harbour.pptx", django_capture_on_commit_callbacks)
    [figure] = deck.metadata["figures"]
    assert figure["page"] == 2 and figure["caption"] == "Harbour crane loads per quarter"
    assert figure_path(tenant_id=corpus.pk, document_id=deck.pk, number=1, index=0).is_file()
    client.force_login(member)
    response = client.post(ASK, {"question": "What are the harbour crane loads per quarter?"})
    cited = next(c for c in response.context["citations"] if c["document_id"] == deck.pk)
    item = citation_items(response.content.decode())[cited["n"]]
    assert f'<img src="{figure_url(deck)}" alt="Harbour crane loads per quarter" width="160" height="160">' in item
    assert "Harbour crane loads per quarter · p. 2" in item
    picture = client.get(figure_url(deck))
    assert picture.status_code == 200 and picture["Content-Type"] == "image/png"


def test_a_member_the_rules_hide_the_document_from_gets_a_404(client, corpus, greenhouse, member):
    reader = MembershipFactory(tenant=corpus).user
    access_rule_grant(tenant=corpus, document=greenhouse, user=reader)  # restricted to the reader
    client.force_login(member)
    assert client.get(figure_url(greenhouse)).status_code == 404
    assert "citation-figure" not in client.post(ASK, {"question": QUESTION}).content.decode()
    client.force_login(reader)
    assert client.get(figure_url(greenhouse)).status_code == 200


def test_another_tenants_member_and_a_figure_it_does_not_have_get_a_404(
    client, greenhouse, member, other_tenant_corpus
):
    client.force_login(member)
    assert client.get(figure_url(greenhouse, index=1)).status_code == 404
    assert client.get(figure_url(greenhouse, number=2)).status_code == 404
    client.force_login(MembershipFactory(tenant=other_tenant_corpus).user)
    assert client.get(figure_url(greenhouse)).status_code == 404


def test_deleting_the_document_removes_its_picture(greenhouse, django_capture_on_commit_callbacks):
    kept = figure_path(tenant_id=greenhouse.tenant_id, document_id=greenhouse.pk, number=1, index=0)
    assert kept.is_file()
    with django_capture_on_commit_callbacks(execute=True):
        document_delete(tenant=greenhouse.tenant, document_id=greenhouse.pk)
    assert not kept.exists()
