"""The original PDF of a document version, kept and shown: served to a member who may see the
document (404 otherwise), opened by a citation at its page ("p. 2" beside it) in the viewer, and
removed with its document, source or tenant.

The harbour manual (``tests.api.test_pages``) is a reportlab PDF of three pages; its document
carries ``page_starts`` and the boxes of its lines as the PDF reader's contract says.
"""

from __future__ import annotations

import json
import re

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.urls import reverse

from core.errors import InvalidInput
from core.models import Membership
from knowledge.access import access_rule_grant
from knowledge.ingestion.readers import ReadDocument
from knowledge.models import Document
from knowledge.originals import original_path, regions_get, tenant_originals_folder
from knowledge.services import document_delete, documents_ingest
from knowledge.services.sources import source_delete
from knowledge.services.tenants import tenant_delete
from tests.api.conftest import client_for
from tests.api.test_pages import harbour_pdf, harbour_splitter, paged_document
from tests.factories import MembershipFactory, SourceFactory

ASK = reverse("portal:ask")
PDF = harbour_pdf()


@pytest.fixture(autouse=True)
def data_dir(settings, tmp_path):
    """Originals are written under a temporary KB_DATA_DIR, never the real one."""
    settings.KB_DATA_DIR = tmp_path / "data"
    return settings.KB_DATA_DIR


@pytest.fixture
def manual(corpus, django_capture_on_commit_callbacks):
    """The harbour manual ingested into the corpus tenant, its original written (on commit)."""
    with django_capture_on_commit_callbacks(execute=True):
        documents_ingest(
            tenant=corpus,
            source=SourceFactory(tenant=corpus, name="manuals"),
            documents=[paged_document(original=PDF)],
            splitter=harbour_splitter(),
        )
    return Document.objects.for_tenant(corpus).get(external_id="manuals/harbour")


def original_url(document, number: int = 1) -> str:
    return reverse("portal:document-original", args=[document.pk, number])


def kept(document, number: int = 1):
    return original_path(tenant_id=document.tenant_id, document_id=document.pk, number=number)


def test_a_member_who_may_see_the_document_gets_its_original_pdf_inline(client, manual, member):
    client.force_login(member)
    response = client.get(original_url(manual))
    assert response.status_code == 200
    assert b"".join(response.streaming_content) == PDF
    assert response["Content-Type"] == "application/pdf"
    assert response["Content-Disposition"].startswith("inline")
    assert response["X-Content-Type-Options"] == "nosniff"
    assert "private" in response["Cache-Control"]


def test_a_member_the_rules_hide_the_document_from_gets_a_404(client, corpus, manual, member):
    reader = MembershipFactory(tenant=corpus).user
    access_rule_grant(tenant=corpus, document=manual, user=reader)  # restricted to the reader
    client.force_login(member)
    assert client.get(original_url(manual)).status_code == 404
    assert client.get(reverse("portal:document-view", args=[manual.pk]) + "?version=1&chunk=1").status_code == 404
    client.force_login(reader)
    assert client.get(original_url(manual)).status_code == 200


def test_another_tenants_member_gets_a_404(client, manual, other_tenant_corpus):
    outsider = MembershipFactory(tenant=other_tenant_corpus).user
    client.force_login(outsider)
    assert client.get(original_url(manual)).status_code == 404
    assert client.get(reverse("portal:document-view", args=[manual.pk])).status_code == 404


def test_a_version_without_a_kept_original_is_a_404_and_its_viewer_opens_the_document_page(client, corpus, member):
    pasta = Document.objects.for_tenant(corpus).get(external_id="recipes/pasta")  # Markdown-like text, no PDF
    client.force_login(member)
    assert client.get(original_url(pasta)).status_code == 404
    response = client.get(reverse("portal:document-view", args=[pasta.pk]) + "?version=1&chunk=0")
    assert response.status_code == 302
    assert response["Location"] == f"/documents/{pasta.pk}/?version=1#chunk-0"


def test_a_version_the_document_does_not_have_is_a_404(client, manual, member):
    client.force_login(member)
    assert client.get(original_url(manual, 2)).status_code == 404
    assert client.get(reverse("portal:document-view", args=[manual.pk]) + "?version=2").status_code == 404


def test_a_malformed_version_or_chunk_is_a_404(client, manual, member):
    client.force_login(member)
    view = reverse("portal:document-view", args=[manual.pk])
    for query in ("?version=01", "?version=1&chunk=x", "?chunk=" + "9" * 10, "?version=²"):
        assert client.get(view + query).status_code == 404, query


def test_the_citation_says_p_2_and_opens_the_viewer_at_page_2_with_the_passages_boxes(client, manual, member):
    client.force_login(member)
    response = client.post(ASK, {"question": "Who calibrates the tide gauge every Tuesday?"})
    html = response.content.decode()
    cited = next(c for c in response.context["citations"] if (c["document_id"], c["chunk"]) == (manual.pk, 1))
    assert cited["pages"] == "p. 2"
    item = re.search(rf'<li value="{cited["n"]}" id="citation-{cited["n"]}">(.*?)</li>', html, re.S).group(1)
    assert '<span class="pages">p. 2</span>' in item

    viewer = client.get(cited["url"])["Location"]  # the link records the opening, then opens the viewer
    assert viewer == f"/documents/{manual.pk}/view/?version=1&chunk={cited['chunk']}"
    page = client.get(viewer)
    assert page.status_code == 200
    data = page.context["viewer_data"]
    assert (data["url"], data["page"], data["pageEnd"]) == (original_url(manual), 2, 2)
    assert data["boxes"] == {"2": [[72, 90.5, 425.5, 102.5]]}  # the line it is, on page 2
    assert "p. 2" in page.content.decode()
    assert (
        json.loads(
            re.search(r'id="viewer-data" type="application/json">(.*?)</script>', page.content.decode()).group(1)
        )
        == data
    )


def test_a_chunk_across_two_pages_opens_both_with_a_box_on_each(client, manual, member):
    client.force_login(member)
    page = client.get(reverse("portal:document-view", args=[manual.pk]) + "?version=1&chunk=2")
    data = page.context["viewer_data"]
    assert (data["page"], data["pageEnd"]) == (2, 3)
    assert sorted(data["boxes"]) == ["2", "3"]
    assert page.context["pages"] == "pp. 2-3"


def test_the_document_page_links_each_chunks_page_to_the_viewer(client, manual, member):
    client.force_login(member)
    html = client.get(reverse("portal:document", args=[manual.pk])).content.decode()
    assert (
        f'href="/documents/{manual.pk}/view/?version=1&amp;chunk=1" title="Open this page of the PDF">p. 2</a>' in html
    )


def test_the_line_boxes_are_kept_beside_the_original_not_on_the_document_row(manual):
    assert "regions" not in manual.metadata and manual.metadata["page_starts"] == [0, 103, 225]
    regions = regions_get(tenant_id=manual.tenant_id, document_id=manual.pk, number=1)
    assert regions.tolist() == paged_document().metadata["regions"]


def test_a_new_version_keeps_the_old_versions_original(corpus, manual, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=True):
        documents_ingest(
            tenant=corpus,
            source=manual.source,
            documents=[
                ReadDocument(
                    external_id="manuals/harbour",
                    title="Harbour maintenance manual",
                    text="Harbour maintenance manual\n\nThe second edition.",
                    metadata={"pages": 1, "page_starts": [0]},
                    original=b"%PDF-1.4 second edition",
                )
            ],
        )
    assert kept(manual, 1).read_bytes() == PDF
    assert kept(manual, 2).read_bytes() == b"%PDF-1.4 second edition"


def test_deleting_the_document_removes_its_originals(corpus, manual, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=True):
        document_delete(tenant=corpus, document_id=manual.pk)
    assert not kept(manual).exists() and not kept(manual).parent.exists()


def test_deleting_the_source_removes_its_documents_originals(manual, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=True):
        source_delete(source=manual.source)
    assert not kept(manual).parent.exists()


def test_deleting_the_tenant_removes_its_originals(corpus, manual, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=True):
        tenant_delete(tenant=corpus)
    assert not kept(manual).parent.parent.exists()


def test_an_ingestion_that_fails_writes_no_original(corpus, django_capture_on_commit_callbacks):
    # The manual is stored first, then the empty document fails the call: nothing is kept.
    documents = [paged_document(original=PDF), ReadDocument(external_id="zz/empty", title="Empty", text="")]
    with django_capture_on_commit_callbacks(execute=True), pytest.raises(InvalidInput):
        documents_ingest(tenant=corpus, source=SourceFactory(tenant=corpus), documents=documents)
    assert not tenant_originals_folder(corpus.pk).exists()


def test_a_viewer_member_may_open_the_viewer_too(client, corpus, manual):
    viewer = MembershipFactory(tenant=corpus, role=Membership.Role.VIEWER).user
    client.force_login(viewer)
    assert client.get(reverse("portal:document-view", args=[manual.pk]) + "?version=1&chunk=1").status_code == 200


def test_an_uploaded_pdf_is_kept_after_its_job_and_opens_in_the_viewer(
    client, corpus, member, data_dir, django_capture_on_commit_callbacks
):
    editor = client_for(MembershipFactory(tenant=corpus, role=Membership.Role.EDITOR).user)
    with django_capture_on_commit_callbacks(execute=True):
        response = editor.post(
            "/api/v1/documents/", {"file": SimpleUploadedFile("harbour.pdf", PDF)}, format="multipart"
        )
    assert editor.get(response.json()["urls"]["self"]).json()["status"] == "done"
    document = Document.objects.for_tenant(corpus).get(external_id="harbour.pdf")
    assert kept(document).read_bytes() == PDF  # the upload's own file is gone; the original stays
    assert not list((data_dir / "uploads").rglob("*.pdf"))

    client.force_login(member)
    page = client.get(reverse("portal:document-view", args=[document.pk]) + "?version=1&chunk=0")
    data = page.context["viewer_data"]
    assert data["page"] == 1 and sorted(data["boxes"]) == [str(n) for n in range(1, data["pageEnd"] + 1)]
