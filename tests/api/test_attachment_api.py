"""The conversation files API: attach a file to a conversation, ask about it there, and nowhere else."""

import io

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile

from core.models import Membership
from knowledge.models import Chunk, Document, Source
from people.models import Conversation, ConversationFile
from tests.api.conftest import client_for
from tests.factories import MembershipFactory

NOTES = (
    b"# Zephyr budget notes\n\nThe zephyrzq project budget for next year is forty-two thousand euros, "
    b"split between the kiln repairs and the glaze workshop.\n"
)
QUESTION = "What is the zephyrzq project budget?"


def budget_pdf() -> bytes:
    """A one-page PDF (reportlab) holding the Zephyr budget sentence."""
    from reportlab.lib.pagesizes import A4
    from reportlab.pdfgen import canvas

    buffer = io.BytesIO()
    pdf = canvas.Canvas(buffer, pagesize=A4)
    pdf.drawString(72, 770, "Zephyr budget notes")
    pdf.drawString(72, 740, "The zephyrzq project budget for next year is forty-two thousand euros.")
    pdf.showPage()
    pdf.save()
    return buffer.getvalue()


def attach(client, data=NOTES, name="zephyr-budget.md", conversation=None):
    url = f"/api/v1/conversations/{conversation}/files/" if conversation else "/api/v1/conversations/files/"
    return client.post(url, {"file": SimpleUploadedFile(name, data)}, format="multipart")


def ask(client, conversation=None, question=QUESTION):
    payload = {"question": question, "extractive": True, **({"conversation": conversation} if conversation else {})}
    response = client.post("/api/v1/ask/", payload, format="json")
    assert response.status_code == 200, response.json()
    return response.json()


def cited(answer) -> set[int]:
    return {citation["document_id"] for citation in answer["citations"]}


def searched(client, query="zephyrzq budget") -> set[int]:
    response = client.post("/api/v1/search/", {"query": query, "mode": "lexical"}, format="json")
    assert response.status_code == 200
    return {result["document_id"] for result in response.json()["results"]}


@pytest.fixture
def attached(corpus, member_client):
    """The member's Zephyr notes, attached to a new conversation through the API."""
    response = attach(member_client)
    assert response.status_code == 201, response.json()
    return response.json()


def test_attaching_a_file_starts_a_conversation_where_asking_cites_it(corpus, member_client, attached):
    assert attached["name"] == "zephyr-budget.md" and attached["size"] == len(NOTES)
    answer = ask(member_client, attached["conversation_id"])
    assert attached["document_id"] in cited(answer)
    assert answer["conversation_id"] == attached["conversation_id"] and answer["turn"] == 1
    citation = next(c for c in answer["citations"] if c["document_id"] == attached["document_id"])
    assert citation["title"] == "zephyr-budget.md"
    listed = member_client.get(f"/api/v1/conversations/{attached['conversation_id']}/files/").json()
    assert [f["id"] for f in listed] == [attached["id"]]


def test_a_file_attached_to_an_existing_conversation_is_searched_in_its_follow_ups(corpus, member_client):
    first = ask(member_client, question="How do I fix a flat bicycle tyre?")
    response = attach(member_client, conversation=first["conversation_id"])
    assert response.status_code == 201
    follow_up = ask(member_client, first["conversation_id"])
    assert response.json()["document_id"] in cited(follow_up)


def test_a_pdf_is_parsed_and_its_text_cited_and_its_pages_are_no_one_elses(
    corpus, member, member_client, client, django_capture_on_commit_callbacks
):
    with django_capture_on_commit_callbacks(execute=True):  # the original PDF is kept once stored
        response = attach(member_client, data=budget_pdf(), name="budget.pdf")
    assert response.status_code == 201, response.json()
    assert response.json()["pages"] == 1
    answer = ask(member_client, response.json()["conversation_id"])
    document_id = response.json()["document_id"]
    assert document_id in cited(answer)
    original = f"/documents/{document_id}/versions/1/original.pdf"
    client.force_login(member)
    assert client.get(original).status_code == 200  # its member's, cited page by page
    client.force_login(MembershipFactory(tenant=corpus, role=Membership.Role.ADMIN).user)
    assert client.get(f"/documents/{document_id}/view/?version=1").status_code == 404
    assert client.get(original).status_code == 404


def test_outside_its_conversation_the_file_is_found_by_no_one(corpus, member_client, attached):
    other = client_for(MembershipFactory(tenant=corpus).user)
    admin = client_for(MembershipFactory(tenant=corpus, role=Membership.Role.ADMIN).user)
    for client in (member_client, other, admin):
        assert attached["document_id"] not in searched(client)
        assert attached["document_id"] not in cited(ask(client))
        assert "Conversation files" not in str(client.get("/api/v1/sources/").json())
    for client in (other, admin):
        documents = client.get("/api/v1/documents/?limit=100").json()["results"]
        assert attached["document_id"] not in {d["id"] for d in documents}
        assert client.get(f"/api/v1/documents/{attached['document_id']}/").status_code == 404
        assert client.get(f"/api/v1/conversations/{attached['conversation_id']}/files/").status_code == 404
        assert attach(client, conversation=attached["conversation_id"]).status_code == 404
    # Its member may open it (a citation links to it) and finds it among their documents.
    assert member_client.get(f"/api/v1/documents/{attached['document_id']}/").status_code == 200
    documents = member_client.get("/api/v1/documents/?limit=100").json()["results"]
    assert attached["document_id"] in {d["id"] for d in documents}


def test_deleting_the_conversation_deletes_its_files_documents(corpus, member_client, attached):
    response = member_client.delete(f"/api/v1/conversations/{attached['conversation_id']}/")
    assert response.status_code == 204
    assert not Document.objects.filter(pk=attached["document_id"]).exists()
    assert not Chunk.objects.filter(tenant=corpus, version__document_id=attached["document_id"]).exists()
    assert not ConversationFile.objects.exists()


def test_removing_a_file_deletes_its_document_and_a_second_removal_is_a_404(corpus, member_client, attached):
    url = f"/api/v1/conversations/{attached['conversation_id']}/files/{attached['id']}/"
    assert member_client.delete(url).status_code == 204
    assert not Document.objects.filter(pk=attached["document_id"]).exists()
    assert member_client.delete(url).status_code == 404
    assert Conversation.objects.filter(pk=attached["conversation_id"]).exists()


@pytest.mark.parametrize(
    ("name", "data", "status", "code"),
    [
        ("broken.pdf", b"not a pdf, only words", 400, "invalid_pdf"),
        ("empty.md", b"", 400, "empty_file"),
        ("tool.exe", b"MZ\x90\x00", 415, "unsupported_file_type"),
        ("lines.jsonl", b'{"id": "a", "text": "x"}\n', 415, "unsupported_file_type"),
    ],
)
def test_a_bad_file_is_a_clear_error_and_nothing_is_stored(corpus, member_client, name, data, status, code):
    before = (Document.objects.count(), Conversation.objects.count(), Source.objects.count())
    response = attach(member_client, data=data, name=name)
    assert response.status_code == status
    assert response.json()["error"]["code"] == code
    assert name in response.json()["error"]["message"]
    assert (Document.objects.count(), Conversation.objects.count(), Source.objects.count()) == before


def test_a_file_over_the_upload_limit_is_a_413_and_nothing_is_stored(corpus, member_client, settings):
    settings.KB_MAX_UPLOAD_BYTES = 1024
    response = attach(member_client, data=NOTES * 20)
    assert response.status_code == 413
    assert response.json()["error"]["code"] == "payload_too_large"
    assert not Conversation.objects.exists()


def test_a_request_without_a_file_is_a_400(corpus, member_client):
    response = member_client.post("/api/v1/conversations/files/", {}, format="multipart")
    assert response.status_code == 400


def test_a_viewer_may_not_attach_files(corpus):
    viewer = client_for(MembershipFactory(tenant=corpus, role=Membership.Role.VIEWER).user)
    response = attach(viewer)
    assert response.status_code == 403
    assert not Document.objects.filter(source__kind=Source.Kind.CONVERSATION).exists()


def test_another_tenants_member_cannot_reach_the_conversation_or_its_file(
    corpus, attached, other_tenant_corpus, other_admin_client
):
    assert other_admin_client.get(f"/api/v1/conversations/{attached['conversation_id']}/files/").status_code == 404
    assert other_admin_client.get(f"/api/v1/documents/{attached['document_id']}/").status_code == 404
    assert attached["document_id"] not in searched(other_admin_client)


def test_the_trace_of_an_answer_from_a_conversations_files_is_its_askers_alone(
    corpus, member_client, attached, settings
):
    settings.KB_TRACING = True
    trace_id = ask(member_client, attached["conversation_id"])["trace_id"]
    admin = client_for(MembershipFactory(tenant=corpus, role=Membership.Role.ADMIN).user)
    assert member_client.get(f"/api/v1/traces/{trace_id}/").status_code == 200
    assert admin.get(f"/api/v1/traces/{trace_id}/").status_code == 404
    plain = ask(member_client)["trace_id"]  # an answer without files: admins read every trace, as before
    assert admin.get(f"/api/v1/traces/{plain}/").status_code == 200


def test_no_one_makes_a_conversation_source_by_hand(corpus, admin_client):
    response = admin_client.post("/api/v1/sources/", {"name": "mine", "kind": "conversation"}, format="json")
    assert response.status_code == 400 and response.json()["error"]["code"] == "invalid_kind"
    assert not Source.objects.filter(kind=Source.Kind.CONVERSATION).exists()
