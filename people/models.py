"""People: what a member tells the knowledge base about themselves, and what they did with it.

A ``Profile`` belongs to a membership (a user in a tenant), since its preferred and muted
sources are that tenant's. Personalization (seed ``magic-of-rag-retrieval.txt``, "Response
Personalization") reads it; ``people.services.profile_update`` writes it.

A member's history: their conversations (``Conversation``, one ``Turn`` per question), their
``Feedback`` on answers and citations, and the citations they opened (``CitationOpen``); each
points at the answer's ``retrieval.Trace``. These tables keep the names they had when the
models lived in ``retrieval`` (``retrieval_feedback``, ``retrieval_conversation``...).
"""

from __future__ import annotations

from django.conf import global_settings, settings
from django.db import models
from django.db.models import Q

from core.models import Membership, Tenant
from core.tenancy import TenantScopedQuerySet
from knowledge.models import Document, Source
from retrieval.models import Trace


class ProfileQuerySet(TenantScopedQuerySet):
    tenant_path = "membership__tenant"


class Profile(models.Model):
    """A member's role/title, team, expertise, language, preferred and muted sources and "about me"."""

    class Expertise(models.TextChoices):
        BEGINNER = "beginner", "Beginner"
        INTERMEDIATE = "intermediate", "Intermediate"
        EXPERT = "expert", "Expert"

    membership = models.OneToOneField(Membership, on_delete=models.CASCADE, related_name="profile")
    title = models.CharField("role or title", max_length=200, blank=True)
    team = models.CharField(max_length=200, blank=True)
    expertise = models.CharField(max_length=20, choices=Expertise.choices, blank=True)
    language = models.CharField("preferred language", max_length=15, choices=global_settings.LANGUAGES, blank=True)
    preferred_sources = models.ManyToManyField(Source, blank=True, related_name="+")
    muted_sources = models.ManyToManyField(Source, blank=True, related_name="+")
    about = models.TextField("about me", max_length=2000, blank=True)
    updated_at = models.DateTimeField(auto_now=True)

    objects = ProfileQuerySet.as_manager()

    def __str__(self) -> str:
        return f"Profile of {self.membership}"


class Feedback(models.Model):
    """A user's thumbs up or down, with an optional comment, on an answer or on one of its citations.

    ``citation`` is the answer's ``[n]`` the feedback is about, or ``None`` for the whole answer;
    ``document`` and ``source`` are the cited passage's (kept for per-source figures, emptied if
    they are deleted). One feedback per user, trace and citation: giving it again replaces it.
    Written by ``people.feedback.feedback_give``.
    """

    class Rating(models.IntegerChoices):
        UP = 1, "Helpful"
        DOWN = -1, "Not helpful"

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="feedback")
    trace = models.ForeignKey(Trace, on_delete=models.CASCADE, related_name="feedback")
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="feedback"
    )
    citation = models.PositiveSmallIntegerField(
        null=True, blank=True, help_text="[n] of the answer; empty: the answer."
    )
    document = models.ForeignKey(Document, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    source = models.ForeignKey(Source, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    rating = models.SmallIntegerField(choices=Rating.choices)
    comment = models.TextField(blank=True, max_length=2000)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    objects = TenantScopedQuerySet.as_manager()

    class Meta:
        db_table = "retrieval_feedback"
        ordering = ["-created_at", "-id"]
        constraints = [
            models.CheckConstraint(condition=Q(rating__in=[1, -1]), name="feedback_rating_up_or_down"),
            models.CheckConstraint(
                condition=Q(citation__isnull=True) | Q(citation__gte=1), name="feedback_citation_positive"
            ),
            # One feedback per user on an answer, and one per user on each of its citations.
            models.UniqueConstraint(
                fields=["trace", "user"],
                condition=Q(citation__isnull=True, user__isnull=False),
                name="feedback_one_per_user_answer",
            ),
            models.UniqueConstraint(
                fields=["trace", "user", "citation"],
                condition=Q(citation__isnull=False, user__isnull=False),
                name="feedback_one_per_user_citation",
            ),
        ]
        indexes = [
            # The admin changelist and the trends page: a tenant's feedback, newest first.
            models.Index(fields=["tenant", "-created_at"], name="feedback_tenant_created_idx"),
        ]

    def __str__(self) -> str:
        target = f"[{self.citation}]" if self.citation else "answer"
        return f"{self.get_rating_display()} on {target} of trace {self.trace_id}"


class ConversationQuerySet(TenantScopedQuerySet):
    def for_user(self, tenant, user):
        """The conversations ``user`` had in ``tenant`` (a user sees only their own)."""
        return self.for_tenant(tenant).filter(user=user)


class Conversation(models.Model):
    """A user's thread of questions: each follow-up is answered in the light of the turns before it.

    ``title`` is the first question, cut to 200 characters. Written by
    ``people.conversations.conversation_ask``.
    """

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="conversations")
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="conversations")
    title = models.CharField(max_length=200)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    objects = ConversationQuerySet.as_manager()

    class Meta:
        db_table = "retrieval_conversation"
        ordering = ["-updated_at", "-id"]
        indexes = [
            # The portal's and the API's list: a user's conversations, most recent first.
            models.Index(fields=["tenant", "user", "-updated_at"], name="conversation_user_recent_idx"),
        ]

    def __str__(self) -> str:
        return self.title


class TurnQuerySet(TenantScopedQuerySet):
    tenant_path = "conversation__tenant"


class Turn(models.Model):
    """One question of a conversation and its answer: the user's history.

    ``query`` is the standalone search query the follow-up was condensed into (equal to the
    question for a first turn or a standalone one); ``citations`` the answer's
    ``[{"n", "document_id", "title", "version", "chunk"}]``; ``trace`` the run's trace while it
    is kept (traces are pruned after ``KB_TRACE_RETENTION_DAYS``; the turn stays).
    """

    conversation = models.ForeignKey(Conversation, on_delete=models.CASCADE, related_name="turns")
    order = models.PositiveIntegerField()
    question = models.TextField()
    query = models.TextField(blank=True)
    answer = models.TextField(blank=True)
    citations = models.JSONField(default=list, blank=True)
    pipeline = models.CharField(max_length=100)
    trace = models.ForeignKey(Trace, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    created_at = models.DateTimeField(auto_now_add=True)

    objects = TurnQuerySet.as_manager()

    class Meta:
        db_table = "retrieval_turn"
        ordering = ["conversation_id", "order"]
        constraints = [
            # Also the index behind ``conversation.turns.order_by("order")``.
            models.UniqueConstraint(fields=["conversation", "order"], name="turn_unique_order_per_conversation"),
            models.CheckConstraint(condition=Q(order__gte=1), name="turn_order_from_one"),
        ]

    def __str__(self) -> str:
        return f"{self.order}. {self.question[:60]}"


class CitationOpen(models.Model):
    """A user opened citation ``[citation]`` of an answer (the trace): the history personalization reads.

    Recorded by ``people.history.citation_open`` when the portal's citation link (or the API)
    is followed. ``document`` and ``source`` are the cited passage's, as for ``Feedback``. One row
    per user, trace and citation; ``opens`` counts the openings and ``opened_at`` is the latest.
    """

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="citation_opens")
    trace = models.ForeignKey(Trace, on_delete=models.CASCADE, related_name="citation_opens")
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="citation_opens")
    citation = models.PositiveSmallIntegerField(help_text="[n] of the answer.")
    document = models.ForeignKey(Document, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    source = models.ForeignKey(Source, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    opens = models.PositiveIntegerField(default=1)
    opened_at = models.DateTimeField(auto_now=True)

    objects = TenantScopedQuerySet.as_manager()

    class Meta:
        db_table = "retrieval_citationopen"
        ordering = ["-opened_at", "-id"]
        constraints = [
            models.CheckConstraint(condition=Q(citation__gte=1), name="citationopen_citation_positive"),
            models.CheckConstraint(condition=Q(opens__gte=1), name="citationopen_opens_positive"),
            models.UniqueConstraint(fields=["trace", "user", "citation"], name="citationopen_one_per_user_citation"),
        ]
        indexes = [
            # ``personal_signals_get``: the documents a tenant's users (one, or a team) opened.
            models.Index(fields=["tenant", "user"], name="citationopen_tenant_user_idx"),
        ]

    def __str__(self) -> str:
        return f"[{self.citation}] of trace {self.trace_id} opened {self.opens}x"


class ConversationFileQuerySet(TenantScopedQuerySet):
    def for_conversation(self, tenant, conversation_id: int):
        """The files attached to conversation ``conversation_id`` of ``tenant``, oldest first."""
        return self.for_tenant(tenant).filter(conversation_id=conversation_id)


class ConversationFile(models.Model):
    """A file a member attached to their conversation, and the document it became.

    The document (``knowledge.attachments``) is private to the member and searched only when they
    ask in this conversation (``people.attachments``); it goes with the conversation. ``name`` is
    the file's name as attached; ``size`` its bytes. Written by
    ``people.attachments.conversation_file_attach``.
    """

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="+")
    conversation = models.ForeignKey(Conversation, on_delete=models.CASCADE, related_name="files")
    document = models.OneToOneField(Document, on_delete=models.CASCADE, related_name="conversation_file")
    name = models.CharField(max_length=255)
    size = models.PositiveBigIntegerField(help_text="Bytes of the file as attached.")
    created_at = models.DateTimeField(auto_now_add=True)

    objects = ConversationFileQuerySet.as_manager()

    class Meta:
        ordering = ["created_at", "id"]
        indexes = [
            # ``for_conversation``: a conversation's files, for the page, the API and each question asked in it.
            models.Index(fields=["conversation", "created_at"], name="conversationfile_conv_idx"),
        ]

    def __str__(self) -> str:
        return self.name
