"""Feedback on answers: a user's thumbs up or down (and comment) on an answer or on one citation.

``feedback_give`` stores it against the answer's trace (one per user, trace and citation; giving
it again replaces it), crediting a citation's feedback to the cited document and source.
``feedback_trends`` reads the share of negative feedback per pipeline or per source, week by
week, for the quality pages. Feedback needs the answer's trace, so it exists only while tracing
is on (``KB_TRACING``) and until the trace is pruned (``KB_TRACE_RETENTION_DAYS``).
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

from django.db import IntegrityError, transaction
from django.db.models import Count, Q
from django.db.models.functions import TruncWeek
from django.utils import timezone

from core.errors import InvalidInput, PermissionDenied
from core.memberships import membership_get
from knowledge.models import Document, Source
from people.models import Feedback
from people.personalization import personal_signals_forget
from retrieval.selectors import trace_get

MAX_COMMENT_CHARS = 2000
RATINGS = {"up": Feedback.Rating.UP, "down": Feedback.Rating.DOWN}


def _rating(value) -> int:
    if isinstance(value, str) and value.lower() in RATINGS:
        return RATINGS[value.lower()]
    if not isinstance(value, bool) and value in (1, -1):
        return int(value)
    raise InvalidInput(f"rating must be 'up' or 'down', not {value!r}.")


def _comment(value) -> str:
    if value is None:
        return ""
    if not isinstance(value, str):
        raise InvalidInput("comment must be text.")
    if "\x00" in value:
        raise InvalidInput("comment must not contain NUL characters.")
    value = value.strip()
    if len(value) > MAX_COMMENT_CHARS:
        raise InvalidInput(f"comment is {len(value)} characters long; the limit is {MAX_COMMENT_CHARS}.")
    return value


def feedback_give(
    *, tenant, user, trace_id: int, rating, citation: int | None = None, comment: str | None = ""
) -> Feedback:
    """Store ``user``'s feedback on the answer of trace ``trace_id`` (or on its citation ``[citation]``).

    ``rating`` is ``"up"``/``"down"`` (or 1/-1); ``comment`` at most 2,000 characters. Giving
    feedback again on the same answer or citation replaces the earlier one. Returns the stored
    ``Feedback``. ``NotFound`` for a trace that is not the tenant's (in a tenant with access rules, also another user's, but for owners and admins); ``InvalidInput`` for a bad
    rating or comment, or a citation the answer does not have; ``PermissionDenied`` for a viewer
    (or a user who is not a member).
    """
    trace = trace_get(tenant=tenant, trace_id=trace_id, user=user)
    values = {"rating": _rating(rating), "comment": _comment(comment), "document": None, "source": None}
    if citation is not None:
        if isinstance(citation, bool) or not isinstance(citation, int):
            raise InvalidInput(f"citation must be a citation number, not {citation!r}.")
        cited = next((c for c in trace.citations or [] if c.get("n") == citation), None)
        if cited is None:
            numbers = ", ".join(f"[{c.get('n')}]" for c in trace.citations or []) or "none"
            raise InvalidInput(f"This answer has no citation [{citation}] (its citations: {numbers}).")
        values["document"] = Document.objects.for_tenant(tenant).filter(pk=cited.get("document_id")).first()
        values["source"] = Source.objects.for_tenant(tenant).filter(pk=cited.get("source_id")).first()
    if not membership_get(user=user, tenant=tenant).can_participate:
        raise PermissionDenied("Viewers cannot give feedback; ask a tenant admin for the member role.")
    lookup = {"tenant": tenant, "trace": trace, "user": user, "citation": citation}
    personal_signals_forget(tenant=tenant, user=user)  # personalization reads feedback (cached)
    try:
        with transaction.atomic():
            return Feedback.objects.update_or_create(**lookup, defaults=values)[0]
    except IntegrityError:  # a first feedback given twice at once: the loser updates the winner's row
        return Feedback.objects.update_or_create(**lookup, defaults=values)[0]


@dataclass(frozen=True)
class TrendRow:
    """One week of feedback for one pipeline or source: counts and the negative share (0-1)."""

    week: object  # datetime.date of the week's Monday
    key: str
    total: int
    negative: int

    @property
    def negative_share(self) -> float:
        return self.negative / self.total if self.total else 0.0


def feedback_trends(*, tenant, by: str, weeks: int = 12) -> list[TrendRow]:
    """The tenant's feedback of the last ``weeks`` weeks, per week and per ``by`` (``"pipeline"``
    or ``"source"``), newest week first: total and negative counts.

    Per pipeline counts every feedback (answers and citations) under the trace's pipeline; per
    source counts citation feedback under the cited source (``"(deleted)"`` once it is gone).
    ``InvalidInput`` for another ``by`` or ``weeks`` outside 1-520.
    """
    if by not in ("pipeline", "source"):
        raise InvalidInput(f"by must be 'pipeline' or 'source', not {by!r}.")
    if isinstance(weeks, bool) or not isinstance(weeks, int) or not 1 <= weeks <= 520:
        raise InvalidInput("weeks must be between 1 and 520.")
    since = timezone.now() - dt.timedelta(weeks=weeks)
    rows = Feedback.objects.for_tenant(tenant).filter(created_at__gte=since)
    if by == "source":
        rows = rows.filter(citation__isnull=False)
        field = "source__name"
    else:
        field = "trace__pipeline"
    grouped = (
        rows.annotate(week=TruncWeek("created_at"))
        .values("week", field)
        .annotate(total=Count("id"), negative=Count("id", filter=Q(rating=Feedback.Rating.DOWN)))
        .order_by("-week", field)
    )
    return [
        TrendRow(week=row["week"].date(), key=row[field] or "(deleted)", total=row["total"], negative=row["negative"])
        for row in grouped
    ]


def source_feedback_counts(*, tenant) -> dict[int, tuple[int, int]]:
    """``{source id: (helpful, not helpful)}``: the tenant's citation feedback per cited source
    (one query; feedback lives as long as its trace, ``KB_TRACE_RETENTION_DAYS``). Sources without
    citation feedback are absent. Read by the recency stage's source-feedback factor (through
    the run's registry, ``retrieval.registry``)."""
    rows = (
        Feedback.objects.for_tenant(tenant)
        .filter(citation__isnull=False, source__isnull=False)
        .values("source_id")
        .annotate(
            up=Count("id", filter=Q(rating=Feedback.Rating.UP)),
            down=Count("id", filter=Q(rating=Feedback.Rating.DOWN)),
        )
    )
    return {row["source_id"]: (row["up"], row["down"]) for row in rows}
