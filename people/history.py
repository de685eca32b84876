"""A user's history with the knowledge base, as personalization reads it.

What is kept, and where: every question and its answer with the documents it cited is a
``Trace`` (``question``, ``answer``, ``citations``; for members also a conversation ``Turn``);
feedback is a ``Feedback``; a citation the user opened is a ``CitationOpen``, recorded here by
``citation_open`` when the portal's citation link (``portal:citation-open``, a redirect) or
``POST /api/v1/traces/<id>/citations/<n>/open/`` is followed. ``people.selectors.history_questions``
reads the latest questions for the prompt's user layer.
"""

from __future__ import annotations

from dataclasses import dataclass

from django.db import IntegrityError, transaction
from django.db.models import F

from core.errors import NotFound
from core.models import Membership
from knowledge.models import Chunk, Document, Source
from people.models import CitationOpen
from people.personalization import personal_signals_forget
from retrieval.models import Trace


@dataclass(frozen=True)
class OpenedCitation:
    """Where an opened citation points: the document's id, and the cited version's number and
    chunk ordinal (``None`` when that chunk no longer exists); ``recorded`` is false for a
    viewer (viewers keep no history)."""

    document_id: int
    version: int | None
    chunk: int | None
    recorded: bool


def citation_open(*, tenant, user, trace_id: int, citation: int) -> OpenedCitation:
    """Record that ``user`` opened citation ``[citation]`` of their answer ``trace_id`` and say
    where it points.

    Only the user's own answers count: a trace of another user or tenant, a citation the answer
    does not have, or a cited document that was deleted is ``NotFound`` (one error, so an id
    reveals nothing) and nothing is stored. Opening again increments ``opens``. A viewer's
    opening is not recorded.
    """
    trace = Trace.objects.for_tenant(tenant).filter(pk=trace_id, user_id=getattr(user, "pk", None)).first()
    cited = next((c for c in (trace.citations or []) if c.get("n") == citation), None) if trace else None
    document = Document.objects.for_tenant(tenant).filter(pk=cited.get("document_id")).first() if cited else None
    if document is None:
        raise NotFound(f"Citation [{citation}] of answer {trace_id} does not exist.")
    chunk = (
        Chunk.objects.for_tenant(tenant)
        .filter(pk=cited.get("chunk_id"), version__document=document)
        .select_related("version")
        .first()
    )
    role = Membership.objects.for_tenant(tenant).filter(user_id=user.pk).values_list("role", flat=True).first()
    recorded = role is not None and role != Membership.Role.VIEWER
    if recorded:
        source = Source.objects.for_tenant(tenant).filter(pk=cited.get("source_id")).first()
        lookup = {"tenant": tenant, "trace": trace, "user": user, "citation": citation}
        defaults = {"document": document, "source": source}
        for attempt in range(2):  # a first opening twice at once: the loser updates the winner's row
            try:
                with transaction.atomic():
                    updated = CitationOpen.objects.filter(**lookup).update(opens=F("opens") + 1, **defaults)
                    if not updated:
                        CitationOpen.objects.create(**lookup, **defaults)
                break
            except IntegrityError:
                if attempt:
                    raise
        personal_signals_forget(tenant=tenant, user=user)
    return OpenedCitation(
        document_id=document.pk,
        version=chunk.version.number if chunk else None,
        chunk=chunk.ordinal if chunk else None,
        recorded=recorded,
    )
