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

The source's live documents (id, ``external_id``, ``sync_key``, fingerprint) are read once, when
the run starts, and kept in step with what the run stores and deletes (``_Run.documents``): the
file connectors' change check, the deletions and the listing's sweep all work from that copy. One
run per source at a time (``syncrun_one_active_per_source``) keeps it true. The permission step's
``rules_apply`` reads the live document ids once more, inside the transaction that writes the
rules, so that rules are written for exactly the documents live when they are written. The
tenant's members and the source's groups are read once per run too, and passed to each batch's
``rules_apply``; a member who joins during a run is given their rules by the next one.

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
from knowledge.connectors.base import Connector, FileConnector, Item, Permission, SourceUnreachable
from knowledge.models import Document, Source, SyncRun
from knowledge.permissions import (
    PermissionCounts,
    groups_sync,
    members_by_email,
    permissions_store,
    rules_apply,
    source_group_ids,
)
from knowledge.services.deletion import documents_mark_deleted
from knowledge.services.ingest_reports import IngestNote
from knowledge.services.ingestion import IngestReport
from knowledge.services.sync_batches import (
    BATCH_DOCUMENTS,
    ingest_isolating,
    outcomes_count,
    own_ids_only,
    sync_progress,
)

logger = logging.getLogger(__name__)


class _Run:
    """One sync's state: the source, its connector, counts, errors and the lease, and the source's
    live documents as ``{document id: {"external_id", "sync_key", "fingerprint"}}`` (read once,
    then kept in step: module docstring)."""

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
        self.documents = self._live_read()
        self.stored_before = {key: len(rows) for key, rows in self.live().items()}
        self.members: dict[str, int] | None = None  # the tenant's, read at the first use
        self.group_ids: dict[str, int] | None = None  # the source's groups, as last synced
        self.read = 0
        self.chunks = 0
        self.checkpoint: dict | None = None

    def _live_read(self) -> dict[int, dict]:
        """The source's stored, not deleted documents by id: the run's one read of them."""
        rows = Document.objects.for_tenant(self.tenant).filter(source=self.source, deleted_at__isnull=True)
        return {
            row.pop("id"): row for row in rows.values("id", "external_id", "sync_key", "fingerprint").order_by("pk")
        }

    def live(self) -> dict[str, list[dict]]:
        """The source's live documents by ``sync_key`` (each ``{"id", "external_id", "fingerprint"}``),
        from the run's copy."""
        by_key: dict[str, list[dict]] = {}
        for document_id, row in self.documents.items():
            by_key.setdefault(row["sync_key"], []).append(
                {"id": document_id, "external_id": row["external_id"], "fingerprint": row["fingerprint"]}
            )
        return by_key

    def changes(self) -> Iterable[Item]:
        """The connector's changes: a file connector's walk gets the stored fingerprints from the
        run's copy, a service's feed the stored checkpoint."""
        if isinstance(self.connector, FileConnector):
            known = {row["sync_key"]: row["fingerprint"] for row in self.documents.values() if row["sync_key"]}
            return self.connector.changes({}, known=known)
        return self.connector.changes(dict(self.source.checkpoint or {}))

    def people(self) -> tuple[dict[str, int], dict[str, int]]:
        """The tenant's members by e-mail and the source's group ids, read at the first call of the run."""
        if self.members is None:
            self.members = members_by_email(self.tenant.pk)
        if self.group_ids is None:
            self.group_ids = source_group_ids(self.source)
        return self.members, self.group_ids

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
            self.counts["unchanged"] += max(self.stored_before.get(item.key, 0), 1)
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
        documents the batch's items no longer hold deleted (in one go), then the checkpoint."""
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
            self._stored_keep(group, report)
            stored.update(item.key for item in group)
            notes.extend(report.notes)
        failed = {error["document"] for error in self.errors[failed_before:]}
        self._others_delete([item for item in items if item.key in stored and item.key not in failed])
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

    def _stored_keep(self, items: list[Item], report: IngestReport) -> None:
        """Bring the run's copy in line with a stored group: its documents live, under their item's
        key and fingerprint (as ``_stored_hook`` wrote them)."""
        by_id = {o.external_id: o.document_id for o in report.outcomes}
        for item in items:
            for document in item.documents:
                if document.external_id in by_id:
                    self.documents[by_id[document.external_id]] = {
                        "external_id": document.external_id,
                        "sync_key": item.key,
                        "fingerprint": item.fingerprint[:300],
                    }

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
                members, group_ids = self.people()
                permissions_store(source=self.source, permissions=permissions)
                rules_apply(
                    source=self.source,
                    document_ids=list(permissions),
                    counts=PermissionCounts(),
                    members=members,
                    group_ids=group_ids,
                )

        return stored

    def _others_delete(self, items: list[Item]) -> None:
        """Delete the live documents of the ``items``' keys that the items, read again, no longer
        hold (a row gone from a JSONL file): found in the run's copy, deleted in one go."""
        kept = {item.key: {d.external_id for d in item.documents} for item in items}
        self._delete(
            [
                document_id
                for document_id, row in self.documents.items()
                if row["sync_key"] in kept and row["external_id"] not in kept[row["sync_key"]]
            ]
        )

    def delete_keys(self, keys: list[str]) -> None:
        """Mark the live documents of ``keys`` deleted."""
        wanted = set(keys)
        self._delete([document_id for document_id, row in self.documents.items() if row["sync_key"] in wanted])

    def _delete(self, document_ids: list[int]) -> None:
        """Mark ``document_ids`` deleted in a few statements (``documents_mark_deleted``), counted."""
        if not document_ids:
            return
        self.counts["deleted"] += len(documents_mark_deleted(document_ids=document_ids, when=timezone.now()))
        for document_id in document_ids:
            self.documents.pop(document_id, None)

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
        members, _ = self.people()
        with transaction.atomic():
            self.group_ids = groups_sync(
                source=self.source, groups=list(self.connector.groups()), counts=self.permissions, members=members
            )
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
            rules_apply(source=self.source, counts=self.permissions, members=members, group_ids=self.group_ids)

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
            state.items_ingest(state.changes(), desc="changes")
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
