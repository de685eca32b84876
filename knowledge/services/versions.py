"""Version retention: how many old versions of a document keep their chunks.

A new version keeps the old version's chunks, marked not current, so ``as_of`` retrieval can
still reach them (``docs/versions.md``). ``Source.versions_kept`` bounds that: only the newest
``versions_kept`` non-current versions of each document keep chunks; older ones lose their
chunks (their text stays, for the version list and diffs). Empty (``None``) keeps all.
"""

from __future__ import annotations

from collections.abc import Iterable

from django.db import transaction
from django.db.models import F, Window
from django.db.models.functions import RowNumber

from knowledge.models import Chunk, DocumentVersion, Source


def versions_prune(*, source: Source, document_ids: Iterable[int] | None = None) -> int:
    """Delete the chunks of old versions beyond ``source.versions_kept`` per document. Returns chunks deleted.

    Applies to ``document_ids`` of the source (default: all its documents); old versions are
    ranked newest first by version number, current versions are never touched. Nothing happens
    when ``versions_kept`` is ``None`` (keep all). The BM25 statistics are unaffected (they
    count current chunks only); postings of the deleted chunks go with them (triggers).
    """
    keep = source.versions_kept
    if keep is None:
        return 0
    old = DocumentVersion.objects.filter(document__source=source, is_current=False)
    if document_ids is not None:
        old = old.filter(document_id__in=list(document_ids))
    ranked = old.annotate(age=Window(RowNumber(), partition_by=[F("document_id")], order_by=F("number").desc())).values(
        "id", "age"
    )
    dropped = [row["id"] for row in ranked if row["age"] > keep]
    if not dropped:
        return 0
    with transaction.atomic():
        deleted, _ = Chunk.objects.filter(version_id__in=dropped, is_current=False).delete()
    return deleted
