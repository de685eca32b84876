"""A file of one's own in a conversation: searched there, by its member, and nowhere else."""

import pytest

from core.errors import InvalidInput, NotFound, PermissionDenied, UnsupportedFileType
from core.models import Membership
from knowledge.attachments import CONVERSATION_SOURCE_NAME, attachments_orphans_delete
from knowledge.ingestion.readers import ReadDocument
from knowledge.models import AccessRule, Chunk, Document, DocumentVersion, Source, TenantQuota
from knowledge.quotas import QuotaExceeded, usage_count
from knowledge.selectors import document_get, document_list, source_list, source_overview
from knowledge.services import documents_ingest
from people.attachments import (
    MAX_FILES_PER_CONVERSATION,
    conversation_file_attach,
    conversation_file_list,
    conversation_file_remove,
)
from people.conversations import conversation_ask, conversation_delete
from people.models import Conversation, ConversationFile
from retrieval.request import AnswerRequest
from retrieval.search import chunk_search
from tests.factories import MembershipFactory

NOTES = (
    b"# Zephyr budget notes\n\nThe zephyrzq project budget for next year is forty-two thousand euros, "
    b"split between the kiln repairs and the glaze workshop.\n"
)
QUESTION = "What is the zephyrzq project budget?"


def attach(tenant, user, conversation_id=None, data=NOTES, name="zephyr-budget.md"):
    return conversation_file_attach(
        tenant=tenant, user=user, file_name=name, data=data, conversation_id=conversation_id
    )


def found(tenant, user, query="zephyrzq budget", **kwargs) -> set[int]:
    """Document ids a plain lexical search by ``user`` finds."""
    results = chunk_search(AnswerRequest(question=query, mode="lexical", **kwargs), tenant=tenant, user=user).results
    return {result.chunk.version.document_id for result in results}


def cited(run) -> set[int]:
    return {citation.passage.document.pk for citation in run.answer.citations}


@pytest.fixture
def attached(corpus, member):
    """``member``'s conversation about bicycles with the Zephyr notes attached."""
    first = conversation_ask(
        AnswerRequest(question="How do I fix a flat tyre?", use_llm=False), tenant=corpus, user=member
    )
    return attach(corpus, member, first.conversation_id)


def test_a_file_attached_to_a_conversation_is_cited_when_its_member_asks_there(corpus, member, attached):
    run = conversation_ask(
        AnswerRequest(question=QUESTION, conversation_id=attached.conversation_id, use_llm=False),
        tenant=corpus,
        user=member,
    )
    assert attached.document_id in cited(run)
    assert "forty-two thousand euros" in run.answer.text
    scope = next(step for step in run.steps if step.stage == "scope")
    assert scope.summary["filter"]["conversation_documents"] == [attached.document_id]


def test_the_file_becomes_a_private_document_in_the_hidden_conversation_source(corpus, member, attached):
    document = attached.document
    assert (document.title, document.source.kind, document.source.name) == (
        "zephyr-budget.md",
        Source.Kind.CONVERSATION,
        CONVERSATION_SOURCE_NAME,
    )
    assert list(AccessRule.objects.filter(document=document).values_list("user_id", flat=True)) == [member.pk]
    assert Chunk.objects.filter(version__document=document).exists()
    assert [
        f.name for f in conversation_file_list(tenant=corpus, user=member, conversation_id=attached.conversation_id)
    ] == ["zephyr-budget.md"]


def test_its_member_does_not_find_it_in_another_conversation_or_a_plain_search(corpus, member, attached):
    assert attached.document_id not in found(corpus, member)
    elsewhere = conversation_ask(AnswerRequest(question=QUESTION, use_llm=False), tenant=corpus, user=member)
    assert attached.document_id not in cited(elsewhere)
    again = conversation_ask(
        AnswerRequest(question=QUESTION, conversation_id=elsewhere.conversation_id, use_llm=False),
        tenant=corpus,
        user=member,
    )
    assert attached.document_id not in cited(again)


def test_an_operator_search_without_a_user_does_not_find_it_either(corpus, attached):
    assert attached.document_id not in found(corpus, None)


def test_another_member_sees_it_nowhere(corpus, attached):
    other = MembershipFactory(tenant=corpus).user
    assert attached.document_id not in found(corpus, other)
    run = conversation_ask(AnswerRequest(question=QUESTION, use_llm=False), tenant=corpus, user=other)
    assert attached.document_id not in cited(run)
    assert attached.document_id not in set(document_list(tenant=corpus, user=other).values_list("pk", flat=True))
    with pytest.raises(NotFound):
        document_get(tenant=corpus, document_id=attached.document_id, user=other)
    with pytest.raises(NotFound):
        conversation_file_list(tenant=corpus, user=other, conversation_id=attached.conversation_id)


def test_admins_and_owners_find_it_neither_in_searches_nor_in_document_lists(corpus, attached):
    for role in (Membership.Role.ADMIN, Membership.Role.OWNER):
        boss = MembershipFactory(tenant=corpus, role=role).user
        assert attached.document_id not in found(corpus, boss)
        run = conversation_ask(AnswerRequest(question=QUESTION, use_llm=False), tenant=corpus, user=boss)
        assert attached.document_id not in cited(run)
        assert attached.document_id not in set(document_list(tenant=corpus, user=boss).values_list("pk", flat=True))
        with pytest.raises(NotFound):
            document_get(tenant=corpus, document_id=attached.document_id, user=boss)


def test_its_member_may_open_it_as_a_cited_document_but_no_source_list_shows_its_source(corpus, member, attached):
    assert document_get(tenant=corpus, document_id=attached.document_id, user=member).title == "zephyr-budget.md"
    for user in (member, MembershipFactory(tenant=corpus, role=Membership.Role.ADMIN).user):
        assert CONVERSATION_SOURCE_NAME not in {s.name for s in source_list(tenant=corpus, user=user)}
        assert CONVERSATION_SOURCE_NAME not in {s.name for s in source_overview(tenant=corpus, user=user)}


def test_naming_sources_still_searches_the_conversations_own_files(corpus, member, attached):
    run = conversation_ask(
        AnswerRequest(
            question=QUESTION,
            conversation_id=attached.conversation_id,
            source_ids=[Source.objects.get(tenant=corpus, name="handbook").pk],
            use_llm=False,
        ),
        tenant=corpus,
        user=member,
    )
    assert attached.document_id in cited(run)


def test_an_attached_file_counts_in_the_tenants_quotas(corpus, member):
    before = usage_count(tenant=corpus, names=["documents", "stored_bytes", "chunks", "sources"])
    attached = attach(corpus, member)
    after = usage_count(tenant=corpus, names=["documents", "stored_bytes", "chunks", "sources"])
    chunks = Chunk.objects.filter(version__document=attached.document).count()
    assert after["documents"] == before["documents"] + 1
    assert after["stored_bytes"] > before["stored_bytes"]
    assert after["chunks"] == before["chunks"] + chunks
    assert after["sources"] == before["sources"] + 1  # the hidden source, made with the tenant's first file


def test_a_file_past_the_documents_quota_is_refused_and_nothing_is_stored(corpus, member):
    TenantQuota.objects.create(tenant=corpus, max_documents=3)  # the corpus holds three
    with pytest.raises(QuotaExceeded):
        attach(corpus, member)
    assert not Conversation.objects.filter(user=member).exists()
    assert not Source.objects.filter(tenant=corpus, kind=Source.Kind.CONVERSATION).exists()
    assert Document.objects.filter(tenant=corpus).count() == 3


def test_attaching_without_a_conversation_starts_one_named_after_the_file(corpus, member):
    attached = attach(corpus, member)
    assert attached.conversation.title == "zephyr-budget.md"
    run = conversation_ask(
        AnswerRequest(question=QUESTION, conversation_id=attached.conversation_id, use_llm=False),
        tenant=corpus,
        user=member,
    )
    assert attached.document_id in cited(run)
    assert run.turn == 1


def test_deleting_the_conversation_deletes_its_files_documents_versions_and_chunks(corpus, member, attached):
    document_id = attached.document_id
    conversation_delete(tenant=corpus, user=member, conversation_id=attached.conversation_id)
    assert not Document.objects.filter(pk=document_id).exists()
    assert not DocumentVersion.objects.filter(document_id=document_id).exists()
    assert not Chunk.objects.filter(tenant=corpus, version__document_id=document_id).exists()
    assert not ConversationFile.objects.exists()
    assert not AccessRule.objects.filter(tenant=corpus).exists()


def test_removing_one_file_deletes_its_document_and_keeps_the_conversation(corpus, member, attached):
    conversation_file_remove(tenant=corpus, user=member, conversation_id=attached.conversation_id, file_id=attached.pk)
    assert not Document.objects.filter(pk=attached.document_id).exists()
    assert Conversation.objects.filter(pk=attached.conversation_id).exists()
    with pytest.raises(NotFound):
        conversation_file_remove(
            tenant=corpus, user=member, conversation_id=attached.conversation_id, file_id=attached.pk
        )


@pytest.mark.parametrize(
    ("name", "data", "error", "code"),
    [
        ("broken.pdf", b"this is not a pdf at all", InvalidInput, "invalid_pdf"),
        ("empty.md", b"   \n", InvalidInput, "empty_file"),
        ("binary.txt", b"\x00\x01\x02\xff" * 50, InvalidInput, None),
        ("program.exe", b"MZ\x90\x00", UnsupportedFileType, "unsupported_file_type"),
        ("many.jsonl", b'{"id": "a", "text": "x"}\n', UnsupportedFileType, "unsupported_file_type"),
    ],
)
def test_a_bad_file_is_refused_with_its_reason_and_nothing_is_stored(corpus, member, name, data, error, code):
    counts = (
        Document.objects.count(),
        Conversation.objects.count(),
        Source.objects.count(),
        AccessRule.objects.count(),
    )
    with pytest.raises(error) as refused:
        attach(corpus, member, data=data, name=name)
    assert code is None or refused.value.code == code
    assert name in refused.value.message or code == "unsupported_file_type"
    assert counts == (
        Document.objects.count(),
        Conversation.objects.count(),
        Source.objects.count(),
        AccessRule.objects.count(),
    )


def test_a_viewer_may_not_attach_a_file_and_nobody_attaches_to_another_members_conversation(corpus, attached):
    viewer = MembershipFactory(tenant=corpus, role=Membership.Role.VIEWER).user
    with pytest.raises(PermissionDenied):
        attach(corpus, viewer)
    with pytest.raises(NotFound):
        attach(corpus, MembershipFactory(tenant=corpus).user, attached.conversation_id)


def test_a_conversation_holds_a_bounded_number_of_files(corpus, member, attached, monkeypatch):
    monkeypatch.setattr("people.attachments.MAX_FILES_PER_CONVERSATION", 1)
    with pytest.raises(InvalidInput) as refused:
        attach(corpus, member, attached.conversation_id, data=NOTES + b"More.\n")
    assert refused.value.code == "too_many_files"
    assert MAX_FILES_PER_CONVERSATION == 20


def test_an_attached_copy_of_a_tenant_document_never_takes_its_place(corpus, member, source):
    """Exact-duplicate detection never pairs a private file with a tenant document, either way."""
    copy = b"Expense reports\n\nThe zephyrzq expense rule: submit reports within thirty days of the trip.\n"
    attached = attach(corpus, member, data=copy, name="expenses.txt")
    text = attached.document.versions.get().text  # the very text stored, so the hashes are equal
    report = documents_ingest(
        tenant=corpus, source=source, documents=[ReadDocument(external_id="copy", title="Copy", text=text)]
    )
    assert report.counts()["created"] == 1  # not "duplicate"
    tenant_copy = Document.objects.get(tenant=corpus, external_id="copy")
    assert Chunk.objects.filter(version__document=tenant_copy).exists()  # its own chunks, not a private file's
    assert Chunk.objects.filter(version__document=attached.document).exists()
    assert found(corpus, MembershipFactory(tenant=corpus).user, "zephyrzq") == {tenant_copy.pk}
    again = attach(corpus, member, data=copy, name="expenses-again.txt")  # nor a copy of a tenant document
    assert Chunk.objects.filter(version__document=again.document).exists()


def test_a_file_whose_members_account_is_gone_is_deleted(corpus, member, attached):
    document_id = attached.document_id
    member.delete()
    assert Document.objects.filter(pk=document_id).exists()  # shown to no one, yet counted
    assert attachments_orphans_delete(tenant=corpus) == 1
    assert not Document.objects.filter(pk=document_id).exists()
