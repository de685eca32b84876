"""Reads about document versions: as-of dates, a document's version list, word diffs.

A version's *date* is its ``published_at`` when the source gave one, else its ingestion time;
the version current on a day D is, per document, the one with the latest date on or before D
(ties: the higher number). Retrieval applies the same rule in SQL
(``retrieval.filters.RetrievalFilter``).
"""

from __future__ import annotations

import difflib
import html
import re
from dataclasses import dataclass
from datetime import date, datetime

from core.errors import InvalidInput, NotFound
from core.models import Tenant
from knowledge.models import DocumentVersion


def as_of_parse(value) -> date | None:
    """An ``as_of`` input (``None``, ``""``, a ``date`` or an ISO ``YYYY-MM-DD`` string) as a date.

    ``None`` or ``""`` mean "current versions" (returns ``None``). ``InvalidInput`` (code
    ``invalid_as_of``) for anything else that is not a calendar date.
    """
    if value is None or value == "":
        return None
    if isinstance(value, datetime):
        return value.date()
    if isinstance(value, date):
        return value
    text = str(value).strip()
    try:
        if re.fullmatch(r"\d{4}-\d{2}-\d{2}", text):
            return date.fromisoformat(text)
    except ValueError:
        pass
    raise InvalidInput(f"as_of must be a date as YYYY-MM-DD, not {text[:40]!r}.", code="invalid_as_of")


def version_date(version: DocumentVersion) -> date:
    """The date a version counts from: ``published_at`` if known, else its ingestion time (UTC)."""
    return (version.published_at or version.ingested_at).date()


@dataclass
class VersionRow:
    """One line of a document's version list."""

    id: int
    number: int
    date: date
    published: bool
    is_current: bool
    chunks: int
    words: int
    duplicate_of: int | None

    def as_dict(self) -> dict:
        return {**self.__dict__, "date": self.date.isoformat()}


def document_versions_list(*, tenant: Tenant, document_id: int) -> list[VersionRow]:
    """The tenant's document's versions, newest first, with their dates and chunk counts.

    ``NotFound`` for a document the tenant does not have.
    """
    from django.db.models import Count

    versions = list(
        DocumentVersion.objects.for_tenant(tenant)
        .filter(document_id=document_id)
        .annotate(chunk_count=Count("chunks"))
        .order_by("-number")
    )
    if not versions:
        raise NotFound(f"Document {document_id} not found.")
    return [
        VersionRow(
            id=v.pk,
            number=v.number,
            date=version_date(v),
            published=v.published_at is not None,
            is_current=v.is_current,
            chunks=v.chunk_count,
            words=len(v.text.split()),
            duplicate_of=v.duplicate_of_id,
        )
        for v in versions
    ]


@dataclass
class WordDiff:
    """A word-level diff of two versions: ``ops`` are ``(tag, text)`` with tag equal/insert/delete.

    Long unchanged runs are shortened to their first and last ``context`` words around "…".
    """

    old_number: int
    new_number: int
    inserted: int
    deleted: int
    ops: list[tuple[str, str]]

    def as_html(self) -> str:
        """Escaped HTML: ``<ins>`` and ``<del>`` around changed words."""
        parts = []
        for tag, text in self.ops:
            text = html.escape(text)
            parts.append(f"<ins>{text}</ins>" if tag == "insert" else f"<del>{text}</del>" if tag == "delete" else text)
        return " ".join(parts)


def version_diff(*, tenant: Tenant, document_id: int, old: int, new: int, context: int = 12) -> WordDiff:
    """Word diff (``difflib.SequenceMatcher`` over whitespace-split words) from version ``old`` to ``new``.

    ``old``/``new`` are version numbers of the tenant's document. ``NotFound`` when either is missing.
    """
    found = {
        v.number: v.text
        for v in DocumentVersion.objects.for_tenant(tenant).filter(document_id=document_id, number__in=[old, new])
    }
    if old not in found or new not in found:
        raise NotFound(f"Document {document_id} has no version {old if old not in found else new}.")
    a, b = found[old].split(), found[new].split()
    matcher = difflib.SequenceMatcher(a=a, b=b, autojunk=False)
    ops: list[tuple[str, str]] = []
    inserted = deleted = 0
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        if tag == "equal":
            words = a[i1:i2]
            if len(words) > 2 * context:
                words = [*words[:context], "…", *words[-context:]]
            ops.append(("equal", " ".join(words)))
            continue
        if tag in ("delete", "replace"):
            ops.append(("delete", " ".join(a[i1:i2])))
            deleted += i2 - i1
        if tag in ("insert", "replace"):
            ops.append(("insert", " ".join(b[j1:j2])))
            inserted += j2 - j1
    return WordDiff(old_number=old, new_number=new, inserted=inserted, deleted=deleted, ops=ops)
