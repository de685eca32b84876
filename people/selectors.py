"""Reads of the people app: a member's conversations and their latest questions, scoped to a tenant."""

from __future__ import annotations

from django.db.models import Count, Prefetch

from core.errors import NotFound
from people.models import Conversation, Turn
from retrieval.models import Trace


def conversation_list(*, tenant, user):
    """``user``'s conversations in ``tenant``, most recent first, each with ``turn_count``."""
    return Conversation.objects.for_user(tenant, user).annotate(turn_count=Count("turns"))


def conversation_get(*, tenant, user, conversation_id: int) -> Conversation:
    """``user``'s conversation ``conversation_id`` in ``tenant`` with its turns in order.

    ``NotFound`` if there is no such conversation or it is another user's or tenant's (the same
    error, so an id reveals nothing).
    """
    try:
        return (
            Conversation.objects.for_user(tenant, user)
            .prefetch_related(Prefetch("turns", queryset=Turn.objects.order_by("order")))
            .get(pk=conversation_id)
        )
    except Conversation.DoesNotExist:
        raise NotFound(f"Conversation {conversation_id} does not exist.")


def history_questions(*, tenant, user, limit: int = 5, exclude: str | None = None) -> list[str]:
    """``user``'s latest distinct questions in ``tenant`` (from their traces), newest first, at most
    ``limit``; ``exclude`` (the question being asked) is left out."""
    questions: list[str] = []
    rows = (
        Trace.objects.for_tenant(tenant)
        .filter(user_id=getattr(user, "pk", None))
        .order_by("-created_at", "-id")
        .values_list("question", flat=True)[: limit * 3]
    )
    for question in rows:
        if question != exclude and question not in questions:
            questions.append(question)
        if len(questions) == limit:
            break
    return questions
