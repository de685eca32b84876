"""The test factories make valid rows (every constraint holds) that hang together by tenant."""

import pytest
from django.db import transaction
from django.db.utils import IntegrityError

from tests.factories import (
    AccessGroupFactory,
    AccessRuleFactory,
    ChunkFactory,
    ConversationFactory,
    DocumentFactory,
    DocumentVersionFactory,
    EvaluationRunFactory,
    FeedbackFactory,
    IngestionJobFactory,
    JudgmentFactory,
    JudgmentListFactory,
    MembershipFactory,
    ProfileFactory,
    SourceFactory,
    TraceFactory,
    TurnFactory,
    UserFactory,
)

pytestmark = pytest.mark.django_db


def test_a_chunk_brings_its_version_document_and_source_in_one_tenant():
    chunk = ChunkFactory()
    version = chunk.version
    assert chunk.tenant == version.document.tenant == version.document.source.tenant
    assert version.number == 1 and version.is_current and chunk.is_current
    assert (chunk.ordinal, chunk.char_start, chunk.char_end) == (0, 0, len(version.text))
    assert chunk.embedder == "local" and len(chunk.embedding) == 384

    second = ChunkFactory(version=version, text="More text.")
    assert second.ordinal == 1 and second.tenant == chunk.tenant


def test_versions_of_a_document_are_numbered_in_turn_and_one_is_current():
    document = DocumentFactory()
    first = DocumentVersionFactory(document=document, is_current=False)
    second = DocumentVersionFactory(document=document)
    assert (first.number, second.number) == (1, 2) and first.content_hash != second.content_hash
    with pytest.raises(IntegrityError), transaction.atomic():
        DocumentVersionFactory(document=document)  # a second current version


def test_a_document_and_a_job_are_in_their_sources_tenant():
    source = SourceFactory()
    assert DocumentFactory(source=source).tenant == source.tenant
    job = IngestionJobFactory(source=source)
    assert job.tenant == source.tenant and job.status == "pending"


def test_an_access_rule_grants_a_source_to_a_group_or_a_document_to_a_user():
    rule = AccessRuleFactory()
    assert rule.source and rule.group and not rule.document and not rule.user
    assert rule.tenant == rule.source.tenant == rule.group.tenant

    document = DocumentFactory()
    user = MembershipFactory(tenant=document.tenant).user
    rule = AccessRuleFactory(document=document, user=user)
    assert rule.tenant == document.tenant and not rule.source and not rule.group

    group = AccessGroupFactory(members=[user])
    assert list(group.members.all()) == [user]


def test_a_profile_belongs_to_a_membership_and_lists_sources():
    source = SourceFactory()
    profile = ProfileFactory(membership=MembershipFactory(tenant=source.tenant), preferred_sources=[source])
    assert list(profile.preferred_sources.all()) == [source] and not profile.muted_sources.exists()


def test_judgments_and_an_evaluation_run():
    judgment = JudgmentFactory(relevant=[{"document": "docs/a", "grade": 1}])
    assert judgment.judgment_list.origin == "manual" and judgment.question.endswith("?")

    run = EvaluationRunFactory(
        judgment_list=JudgmentListFactory(), ndcg=0.75, query_ndcg=[("q1", 0.5), ("q2", 1.0)], metrics__p50_ms=12.5
    )
    assert run.metrics == {"ndcg@10": 0.75, "queries": 2, "p50_ms": 12.5}
    assert run.per_query[1] == {"query_id": "q2", "question": "Question q2?", "metrics": {"ndcg@10": 1.0}, "top": []}


def test_a_conversation_of_a_member_with_turns_in_order_and_feedback_on_a_trace():
    conversation = ConversationFactory()
    assert conversation.user.memberships.get().tenant == conversation.tenant
    turns = [TurnFactory(conversation=conversation) for _ in range(2)]
    assert [turn.order for turn in turns] == [1, 2]

    feedback = FeedbackFactory(rating=-1, citation=1)
    assert feedback.tenant == feedback.trace.tenant and feedback.user == feedback.trace.user
    user = UserFactory()
    assert TraceFactory(user=user).user == user
