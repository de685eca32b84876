"""Conversations: a user's questions kept as a thread, each follow-up answered in its light.

``conversation_ask`` answers a question through ``pipeline_answer`` with the conversation's
earlier questions as ``history`` (the pipeline's condense step makes a follow-up standalone:
``retrieval.stages.rewrite.condense.Condense``), then stores the turn: question, standalone query, answer,
citations and trace. Without a conversation id it starts a new conversation. Callers ask through
``people.asking.ask``, which answers a signed-in user through it. A question in a conversation
also searches the files attached to it (``people.attachments``), and deleting the conversation
deletes them.
"""

from __future__ import annotations

from dataclasses import replace

from django.db import transaction
from django.db.models import Max

from core.errors import PermissionDenied
from core.memberships import membership_get
from core.replicas import replica_write_mark
from people.attachments import conversation_document_ids, conversation_files_delete
from people.models import Conversation, Turn
from people.selectors import conversation_get
from retrieval.pipeline import pipeline_answer
from retrieval.request import AnswerRequest
from retrieval.runs import AnswerRun

HISTORY_TURNS = 5  # earlier questions given to the pipeline


def _standalone_query(run: AnswerRun, question: str) -> str:
    for step in run.steps:
        if step.stage in ("condense", "rephrase") and isinstance(step.summary, dict) and step.summary.get("query"):
            return str(step.summary["query"])
    return question


def conversation_ask(request: AnswerRequest, *, tenant, user, **run_options) -> AnswerRun:
    """Answer ``request`` as the next turn of ``user``'s conversation ``request.conversation_id``
    (or of a new conversation), store the turn, and return the run with ``conversation_id`` and
    ``turn`` set.

    ``run_options`` are ``pipeline_answer``'s other keyword arguments (``llm``, ``on_event``...).
    The request goes on with the conversation's earlier questions as ``history`` and its
    attached files as ``conversation_documents``. A viewer's question is answered but not kept
    (no conversation; continuing one is ``PermissionDenied``). ``NotFound`` for a conversation
    that is not the user's in this tenant, ``PermissionDenied`` for an anonymous user,
    ``InvalidInput`` for a bad question or option (then nothing is stored).
    """
    conversation_id = request.conversation_id
    if user is None or not user.is_authenticated:
        raise PermissionDenied("Conversations need a signed-in user.")
    if not membership_get(user=user, tenant=tenant).can_participate:
        if conversation_id is not None:
            raise PermissionDenied("Viewers do not keep conversations; ask a tenant admin for the member role.")
        return pipeline_answer(request, tenant=tenant, user=user, **run_options)  # answered, not kept
    if conversation_id is not None:
        conversation = conversation_get(tenant=tenant, user=user, conversation_id=conversation_id)
        recent = conversation.turns.order_by("-order").values_list("question", flat=True)[:HISTORY_TURNS]
        request = replace(
            request,
            history=tuple(reversed(recent)),
            conversation_documents=conversation_document_ids(tenant=tenant, conversation_id=conversation.pk),
        )
    run = pipeline_answer(request, tenant=tenant, user=user, **run_options)
    with transaction.atomic():
        if conversation_id is None:
            conversation = Conversation.objects.create(tenant=tenant, user=user, title=run.answer.question[:200])
            order = 1
        else:
            # The row lock orders concurrent follow-ups of one conversation.
            conversation = Conversation.objects.select_for_update().get(pk=conversation_id)
            order = (conversation.turns.aggregate(last=Max("order"))["last"] or 0) + 1
            conversation.save(update_fields=["updated_at"])
        Turn.objects.create(
            conversation=conversation,
            order=order,
            question=run.answer.question,
            query=_standalone_query(run, run.answer.question),
            answer=run.answer.text,
            citations=[
                {
                    "n": c.n,
                    "document_id": c.passage.document.pk,
                    "title": c.passage.document.title,
                    "version": c.passage.version.number,
                    "version_date": c.as_dict()["version_date"],
                    "chunk": c.passage.anchor.ordinal,
                }
                for c in run.answer.citations
            ],
            pipeline=run.pipeline,
            trace_id=run.trace_id,
        )
    # The member's next reads (a follow-up, their history) wait for a replica to replay the turn.
    transaction.on_commit(lambda: replica_write_mark(tenant_id=tenant.pk, user_id=user.pk))
    run.conversation_id, run.turn = conversation.pk, order
    return run


def conversation_delete(*, tenant, user, conversation_id: int) -> None:
    """Delete ``user``'s conversation ``conversation_id``, its turns (their traces stay until
    pruned) and its attached files' documents, versions and chunks, in one transaction.
    ``NotFound`` if it is not the user's in this tenant."""
    conversation = conversation_get(tenant=tenant, user=user, conversation_id=conversation_id)
    with transaction.atomic():
        conversation_files_delete(tenant=tenant, conversation=conversation)
        conversation.delete()
