"""The ask page's conversation files: attach one, ask about it in its conversation, remove it."""

from django.core.files.uploadedfile import SimpleUploadedFile
from django.urls import reverse

from knowledge.models import Document
from people.models import Conversation, ConversationFile
from tests.factories import MembershipFactory

ASK = reverse("portal:ask")
HX = {"HTTP_HX_REQUEST": "true"}
NOTES = (
    b"# Zephyr budget notes\n\nThe zephyrzq project budget for next year is forty-two thousand euros, "
    b"split between the kiln repairs and the glaze workshop.\n"
)
QUESTION = "What is the zephyrzq project budget?"


def start(client, data=NOTES, name="zephyr-budget.md", **headers):
    return client.post(reverse("portal:conversation-file-start"), {"file": SimpleUploadedFile(name, data)}, **headers)


def test_a_file_attached_on_the_ask_page_opens_its_conversation_where_answers_cite_it(client, corpus, member):
    client.force_login(member)
    assert 'id="conversation-file-start"' in client.get(ASK).content.decode()

    response = start(client)
    attached = ConversationFile.objects.get()
    assert response.status_code == 302 and response["Location"] == f"{ASK}?conversation={attached.conversation_id}"
    page = client.get(response["Location"]).content.decode()
    assert "zephyr-budget.md" in page and reverse("portal:document", args=[attached.document_id]) in page

    answer = client.post(ASK, {"question": QUESTION, "conversation": attached.conversation_id}).content.decode()
    assert 'href="/answers/' in answer and "forty-two thousand euros" in answer
    elsewhere = client.post(ASK, {"question": QUESTION}).content.decode()
    assert "forty-two thousand euros" not in elsewhere


def test_with_htmx_a_new_conversation_opens_by_a_client_redirect(client, corpus, member):
    client.force_login(member)
    response = start(client, **HX)
    assert response.status_code == 200
    assert response["HX-Redirect"] == f"{ASK}?conversation={Conversation.objects.get().pk}"


def test_a_refused_file_is_shown_in_the_swapped_form_with_its_reason_and_nothing_is_stored(client, corpus, member):
    client.force_login(member)
    response = start(client, data=b"not a pdf at all", name="broken.pdf", **HX)
    assert response.status_code == 400
    html = response.content.decode()
    assert 'id="conversation-file-start"' in html and "broken.pdf: not a PDF" in html
    assert not Conversation.objects.exists() and not ConversationFile.objects.exists()


def test_attaching_to_the_open_conversation_and_removing_a_file_swap_its_list(client, corpus, member):
    client.force_login(member)
    start(client)
    conversation = Conversation.objects.get()
    add = reverse("portal:conversation-file-add", args=[conversation.pk])
    response = client.post(add, {"file": SimpleUploadedFile("second.txt", b"The second zephyrzq note.\n")}, **HX)
    assert response.status_code == 200
    html = response.content.decode()
    assert 'id="conversation-files"' in html and "second.txt" in html and "Attached second.txt." in html

    second = ConversationFile.objects.get(name="second.txt")
    remove = reverse("portal:conversation-file-delete", args=[conversation.pk, second.pk])
    html = client.post(remove, **HX).content.decode()
    assert "second.txt" not in html and "zephyr-budget.md" in html
    assert not Document.objects.filter(pk=second.document_id).exists()


def test_another_member_can_neither_attach_to_the_conversation_nor_open_its_file(client, corpus, member):
    client.force_login(member)
    start(client)
    attached = ConversationFile.objects.get()
    client.force_login(MembershipFactory(tenant=corpus).user)
    add = reverse("portal:conversation-file-add", args=[attached.conversation_id])
    assert client.post(add, {"file": SimpleUploadedFile("x.md", NOTES)}).status_code == 404
    assert client.get(reverse("portal:document", args=[attached.document_id])).status_code == 404
    assert ConversationFile.objects.count() == 1
