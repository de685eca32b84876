"""One sync run of any connector (``knowledge.connectors.base.Connector``): content, the listing,
and permissions, as ``SyncRun.scope`` asks.

* **content** (``scope="content"``, a service source's ``sync_every`` schedule): the connector's
  ``changes`` since the stored checkpoint. Items are ingested in batches; each document's
  permission is written in the same transaction as the document (``knowledge.permissions``), so
  a new restricted document is never visible to the whole tenant, not even for a moment. The
  checkpoint is stored after each batch, so a run stopped half-way (a revoked token, the server
  down, the worker killed) resumes from there. Documents of an item read again that the item no
  longer holds (a line gone from a JSONL file) are deleted.
* **permissions** (``scope="permissions"``, a service source's ``perm_every`` schedule): no
  content is read. The source's groups and their members, the ``listing`` of what the source
  holds now (documents gone from it are deleted) and every live document's permission; the
  access rules are then rewritten where they differ.
* **all** (the file kinds always; ``manage.py source sync``, the first sync and the API's sync of
  a service source): content, then the listing, with items the change feed missed (a fingerprint
  that differs from the stored one) read again with ``fetch``, then permissions (for the
  connectors that follow them).

Deleted documents leave current results and counts; ``as_of`` searches before the deletion still
find them. A refused credential (``CredentialRejected``) or an unreachable source fails the run
with its message; what earlier batches stored stays with its checkpoint, and nothing is deleted.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable

from django.db import transaction
from django.db.models import QuerySet
from django.utils import timezone
from tqdm import tqdm

from knowledge.connectors import connector_for
from knowledge.connectors.base import Connector, Item, Permission, SourceUnreachable
from knowledge.models import Document, Source, SyncRun
from knowledge.permissions import PermissionCounts, groups_sync, permissions_store, rules_apply
from knowledge.services.deletion import document_mark_deleted
from knowledge.services.ingest_reports import IngestNote
from knowledge.services.sync_batches import (
    BATCH_DOCUMENTS,
    ingest_isolating,
    outcomes_count,
    own_ids_only,
    sync_progress,
)

logger = logging.getLogger(__name__)


class _Run:
    """One sync's state: the source, its connector, counts, errors and the lease."""

    def __init__(self, run: SyncRun, held: QuerySet, progress: bool):
        self.run, self.held, self.progress = run, held, progress
        self.source: Source = run.source
        self.tenant = run.tenant
        self.connector: Connector = connector_for(self.source)
        self.follows = self.connector.follows_permissions
        self.counts = {"new": 0, "updated": 0, "unchanged": 0, "deleted": 0, "failed": 0}
        self.errors: list[dict] = []
        self.permissions = PermissionCounts()
        self.started = time.perf_counter()
        self.stored_before = self.live()
        self.read = 0
        self.chunks = 0
        self.checkpoint: dict | None = None

    def live(self) -> dict[str, list[dict]]:
        """The source's stored, not deleted documents by ``sync_key``."""
        by_key: dict[str, list[dict]] = {}
        rows = Document.objects.for_tenant(self.tenant).filter(source=self.source, deleted_at__isnull=True)
        for row in rows.values("id", "external_id", "sync_key", "fingerprint"):
            by_key.setdefault(row["sync_key"], []).append(row)
        return by_key

    # -- content ---------------------------------------------------------------------------------

    def triage(self, item: Item) -> bool:
        """Count an item that needs no reading (failed, gone, unchanged) and keep its checkpoint;
        True when it is to be ingested."""
        if item.checkpoint is not None:
            self.checkpoint = item.checkpoint
        if item.error:
            self.counts["failed"] += 1
            self.errors.append({"document": item.key, "error": item.error})
        elif item.deleted or (not item.unchanged and not item.documents):
            self.delete_keys([item.key])
        elif item.unchanged:
            self.counts["unchanged"] += max(len(self.stored_before.get(item.key, ())), 1)
        else:
            return True
        return False

    def items_ingest(self, items: Iterable[Item], *, desc: str) -> None:
        """Ingest ``items`` in batches of ``BATCH_DOCUMENTS``, storing the checkpoint after each.

        A list (a file connector's walk) is counted first, so the progress has a total and an ETA.
        """
        total = None
        if isinstance(items, list):
            items = [item for item in items if self.triage(item)]
            total = len(items)
        else:
            items = (item for item in items if self.triage(item))
        bar = tqdm(
            total=total, unit="item", desc=f"{self.source.name} {desc}", disable=not self.progress, mininterval=1.0
        )
        batch: list[Item] = []
        for item in items:
            batch.append(item)
            if len(batch) >= BATCH_DOCUMENTS:
                self.batch_ingest(batch, total)
                bar.update(len(batch))
                batch = []
        if batch:
            self.batch_ingest(batch, total)
            bar.update(len(batch))
        bar.close()
        self.checkpoint_store()

    def batch_ingest(self, items: list[Item], total: int | None) -> None:
        """Store a batch: documents with their keys (and permissions) in one transaction, then the
        documents the batch's items no longer hold deleted, then the checkpoint."""
        seconds = time.perf_counter() - self.started
        self.held.update(
            progress=sync_progress(
                items=total or self.read + len(items), done=self.read, chunks=self.chunks, seconds=seconds
            )
        )
        failed_before, count = len(self.errors), len(items)
        items = own_ids_only(self.tenant, self.source, items, self.counts, self.errors)
        stored: set[str] = set()
        notes: list[IngestNote] = []
        for group, report in ingest_isolating(
            self.tenant, self.source, items, self.counts, self.errors, on_stored=self._stored_hook
        ):
            outcomes_count(report, self.counts)
            self.chunks += report.counts()["chunks"]
            stored.update(item.key for item in group)
            notes.extend(report.notes)
        failed = {error["document"] for error in self.errors[failed_before:]}
        for item in items:
            if item.key in stored and item.key not in failed:
                self._others_delete(item)
        self.notes_record(notes, items)
        self.read += count
        self.checkpoint_store()

    def notes_record(self, notes: list[IngestNote], items: list[Item]) -> None:
        """Add the ingestion's notes (pages past the OCR budget) to the run's ``errors`` under their
        item's key, as ``{"document", "error"}`` like a failure's, without counting a failure."""
        keys = {document.external_id: item.key for item in items for document in item.documents}
        for note in notes:
            self.errors.append({"document": keys.get(note.external_id, note.external_id), "error": note.message})

    def checkpoint_store(self) -> None:
        """Keep the checkpoint of the last item consumed (every item before it is stored)."""
        if self.checkpoint is not None and self.checkpoint != self.source.checkpoint:
            Source.objects.filter(pk=self.source.pk).update(checkpoint=self.checkpoint)
            self.source.checkpoint = self.checkpoint

    def _stored_hook(self, items: list[Item]):
        """The ``documents_ingest`` hook for ``items``: their documents' key and fingerprint, and for
        connectors that follow permissions their permission, written inside the storing transaction."""

        def stored(report) -> None:
            by_id = {o.external_id: o.document_id for o in report.outcomes}
            permissions: dict[int, Permission | None] = {}
            for item in items:
                ids = [by_id[d.external_id] for d in item.documents if d.external_id in by_id]
                Document.objects.filter(pk__in=ids).update(sync_key=item.key, fingerprint=item.fingerprint[:300])
                permissions.update(dict.fromkeys(ids, item.permission))
            if self.follows:
                permissions_store(source=self.source, permissions=permissions)
                rules_apply(source=self.source, document_ids=list(permissions), counts=PermissionCounts())

        return stored

    def _others_delete(self, item: Item) -> None:
        """Delete the live documents of ``item.key`` that the item, read again, no longer holds."""
        kept = [d.external_id for d in item.documents]
        rows = Document.objects.for_tenant(self.tenant).filter(
            source=self.source, sync_key=item.key, deleted_at__isnull=True
        )
        self._delete(rows.exclude(external_id__in=kept))

    def delete_keys(self, keys: list[str]) -> None:
        """Mark the live documents of ``keys`` deleted."""
        rows = Document.objects.for_tenant(self.tenant).filter(
            source=self.source, sync_key__in=keys, deleted_at__isnull=True
        )
        self._delete(rows)

    def _delete(self, rows: QuerySet) -> None:
        now = timezone.now()
        for document_id in rows.values_list("pk", flat=True):
            if document_mark_deleted(document_id=document_id, when=now):
                self.counts["deleted"] += 1

    # -- listing and permissions -------------------------------------------------------------------

    def sweep(self, *, refetch: bool) -> list[str]:
        """Delete what the source no longer holds; with ``refetch``, read again the items whose
        fingerprint changed or that were never stored. Returns the live keys."""
        self.held.update(progress={"stage": "deleting"})
        listed = dict(self.connector.listing())
        stored = self.live()
        self.delete_keys([key for key in stored if key not in listed])
        if refetch:
            stale = [
                key
                for key, fingerprint in listed.items()
                if key not in stored or any(row["fingerprint"] != fingerprint[:300] for row in stored[key])
            ]
            if stale:
                self.items_ingest(self.connector.fetch(stale), desc="changed")
        return list(listed)

    def permissions_sync(self, keys: list[str]) -> None:
        """Groups, then each live document's permission, then the access rules where they differ."""
        self.held.update(progress={"stage": "permissions"})
        with transaction.atomic():
            groups_sync(source=self.source, groups=list(self.connector.groups()), counts=self.permissions)
        documents = self.live()
        found: dict[int, Permission | None] = {}
        for key, permission in self.connector.permissions([k for k in keys if k in documents]):
            for row in documents.get(key, []):
                found[row["id"]] = permission
            if permission is None:
                self.errors.append(
                    {
                        "document": key,
                        "error": "its permissions could not be read at the source: visible to the tenant's admins only",
                    }
                )
        with transaction.atomic():
            permissions_store(source=self.source, permissions=found)
            rules_apply(source=self.source, counts=self.permissions)

    def outcome(self, status: str, error: str = "") -> dict:
        """The run's final fields."""
        return {
            "status": status,
            "errors": self.errors[:1000],
            "error": error,
            "progress": {},
            "permissions": self.permissions.as_dict() if self.follows and self.run.scope != "content" else {},
            **self.counts,
        }


def sync_steps(run: SyncRun, held: QuerySet, *, progress: bool = False) -> dict:
    """Run ``run`` (module docstring) under the lease ``held``; returns the run's final fields.

    ``SourceUnreachable`` (``CredentialRejected`` among them) propagates when nothing was stored
    yet (the run fails with "Nothing changed."); after a batch was stored, the run fails with the
    message and its counts, and says that the next sync resumes.
    """
    held.update(progress={"stage": "listing"})
    state = _Run(run, held, progress)
    scope = run.scope
    try:
        if scope in (SyncRun.Scope.ALL, SyncRun.Scope.CONTENT):
            state.items_ingest(state.connector.changes(dict(state.source.checkpoint or {})), desc="changes")
        if scope in (SyncRun.Scope.ALL, SyncRun.Scope.PERMISSIONS):
            keys = state.sweep(refetch=scope == SyncRun.Scope.ALL)
            if state.follows:
                state.permissions_sync(keys)
                Source.objects.filter(pk=state.source.pk).update(last_perm_synced_at=timezone.now())
    except SourceUnreachable as exc:
        if not state.read and not state.counts["deleted"]:
            raise
        return state.outcome(
            SyncRun.Status.FAILED,
            f"{exc.message} What was stored before stays; the next sync resumes from its checkpoint.",
        )
    logger.info(
        "Synced %s (%s) in %.1f s: %s, permissions %s",
        state.source,
        scope,
        time.perf_counter() - state.started,
        state.counts,
        state.permissions.as_dict() if state.follows else "-",
    )
    return state.outcome(SyncRun.Status.DONE)
