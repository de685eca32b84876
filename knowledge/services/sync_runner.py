"""Sync of a service source (Slack, Confluence, Google Drive, GitHub, Jira, Notion): content and
permissions, as ``SyncRun.scope`` asks.

* **content** (``scope="content"``, the ``sync_every`` schedule): the connector's ``changes``
  since the stored checkpoint. Items are ingested in batches; each document's permission is
  written in the same transaction as the document (``knowledge.permissions``), so a new
  restricted document is never visible to the whole tenant, not even for a moment. The
  checkpoint is stored after each batch, so a run stopped half-way (a revoked token, the server
  down, the worker killed) resumes from there.
* **permissions** (``scope="permissions"``, the ``perm_every`` schedule, 15 minutes by default):
  no content is read. The source's groups and their members, the ``listing`` of what the source
  holds now (documents gone from it are deleted) and every live document's permission; the
  access rules are then rewritten where they differ.
* **all** (``manage.py source sync``, the first sync, the API's sync): content, then the listing,
  with items the change feed missed (a fingerprint that differs from the stored one) read again
  with ``fetch``, then permissions.

A refused credential (``CredentialRejected``) or an unreachable service fails the run with its
message; what earlier batches stored stays with its checkpoint, and nothing is deleted.
"""

from __future__ import annotations

import logging
import time

from django.db import transaction
from django.db.models import QuerySet
from django.utils import timezone
from tqdm import tqdm

from knowledge.connectors.base import Item, Permission, ServiceConnector
from knowledge.connectors.services import service_connector
from knowledge.models import Document, Source, SyncRun
from knowledge.permissions import PermissionCounts, groups_sync, permissions_store, rules_apply
from knowledge.services.deletion import document_mark_deleted
from knowledge.services.sync_batches import (
    BATCH_DOCUMENTS,
    ingest_isolating,
    outcomes_count,
    own_ids_only,
    sync_progress,
)

logger = logging.getLogger(__name__)


class _Run:
    """One service sync's state: the source, its connector, counts, errors and the lease."""

    def __init__(self, run: SyncRun, held: QuerySet, progress: bool):
        self.run, self.held, self.progress = run, held, progress
        self.source: Source = run.source
        self.tenant = run.tenant
        self.connector: ServiceConnector = service_connector(self.source)
        self.counts = {"new": 0, "updated": 0, "unchanged": 0, "deleted": 0, "failed": 0}
        self.errors: list[dict] = []
        self.permissions = PermissionCounts()
        self.started = time.perf_counter()
        self.read = 0
        self.chunks = 0

    def live(self) -> dict[str, list[dict]]:
        """The source's stored, not deleted documents by ``sync_key``."""
        by_key: dict[str, list[dict]] = {}
        rows = Document.objects.for_tenant(self.tenant).filter(source=self.source, deleted_at__isnull=True)
        for row in rows.values("id", "external_id", "sync_key", "fingerprint"):
            by_key.setdefault(row["sync_key"], []).append(row)
        return by_key

    # -- content ---------------------------------------------------------------------------------

    def ingest(self, items: list[Item]) -> None:
        """Store a batch of items: errors counted, deletions applied, the rest ingested with their
        permissions in the same transaction; then the last item's checkpoint is kept."""
        readable: list[Item] = []
        for item in items:
            if item.error:
                self.counts["failed"] += 1
                self.errors.append({"document": item.key, "error": item.error})
            elif item.deleted:
                self.delete_keys([item.key])
            elif item.unchanged:
                self.counts["unchanged"] += 1
            elif item.documents:
                readable.append(item)
        readable = own_ids_only(self.tenant, self.source, readable, self.counts, self.errors)
        for _items, report in ingest_isolating(
            self.tenant, self.source, readable, self.counts, self.errors, on_stored=self._stored_hook
        ):
            outcomes_count(report, self.counts)
            self.chunks += report.counts()["chunks"]
        self.read += len(items)
        checkpoint = next((item.checkpoint for item in reversed(items) if item.checkpoint is not None), None)
        if checkpoint is not None:
            Source.objects.filter(pk=self.source.pk).update(checkpoint=checkpoint)
            self.source.checkpoint = checkpoint
        self.held.update(
            progress=sync_progress(
                items=self.read, done=self.read, chunks=self.chunks, seconds=time.perf_counter() - self.started
            )
        )

    def _stored_hook(self, items: list[Item]):
        """The ``documents_ingest`` hook for ``items``: their documents' key, fingerprint and
        permission, written inside the storing transaction."""

        def stored(report) -> None:
            by_id = {o.external_id: o.document_id for o in report.outcomes}
            permissions: dict[int, Permission | None] = {}
            for item in items:
                ids = [by_id[d.external_id] for d in item.documents if d.external_id in by_id]
                Document.objects.filter(pk__in=ids).update(sync_key=item.key, fingerprint=item.fingerprint[:300])
                permissions.update(dict.fromkeys(ids, item.permission))
            permissions_store(source=self.source, permissions=permissions)
            rules_apply(source=self.source, document_ids=list(permissions), counts=PermissionCounts())

        return stored

    def items_ingest(self, items, *, desc: str) -> None:
        """Ingest an iterator of items in batches of ``BATCH_DOCUMENTS``."""
        bar = tqdm(unit="item", desc=f"{self.source.name} {desc}", disable=not self.progress, mininterval=1.0)
        batch: list[Item] = []
        for item in items:
            batch.append(item)
            if len(batch) >= BATCH_DOCUMENTS:
                self.ingest(batch)
                bar.update(len(batch))
                batch = []
        if batch:
            self.ingest(batch)
            bar.update(len(batch))
        bar.close()

    def delete_keys(self, keys: list[str]) -> None:
        """Mark the live documents of ``keys`` deleted (they leave search; ``as_of`` still finds them)."""
        now = timezone.now()
        rows = Document.objects.for_tenant(self.tenant).filter(
            source=self.source, sync_key__in=keys, deleted_at__isnull=True
        )
        for document_id in rows.values_list("pk", flat=True):
            if document_mark_deleted(document_id=document_id, when=now):
                self.counts["deleted"] += 1

    # -- listing and permissions -------------------------------------------------------------------

    def sweep(self, *, refetch: bool) -> list[str]:
        """Delete what the source no longer holds; with ``refetch``, read again the items whose
        fingerprint changed or that were never stored. Returns the live keys."""
        self.held.update(progress={"stage": "listing"})
        listed = dict(self.connector.listing())
        stored = self.live()
        self.delete_keys([key for key in stored if key and key not in listed])
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


def service_sync(run: SyncRun, held: QuerySet, *, progress: bool = False) -> dict:
    """Run ``run`` of a service source (module docstring); returns the run's final fields.

    ``CredentialRejected`` and ``SourceUnreachable`` propagate (the run fails with their message).
    """
    state = _Run(run, held, progress)
    scope = run.scope
    if scope in (SyncRun.Scope.ALL, SyncRun.Scope.CONTENT):
        state.held.update(progress={"stage": "listing"})
        state.items_ingest(state.connector.changes(dict(state.source.checkpoint or {})), desc="changes")
    if scope in (SyncRun.Scope.ALL, SyncRun.Scope.PERMISSIONS):
        keys = state.sweep(refetch=scope == SyncRun.Scope.ALL)
        state.permissions_sync(keys)
        Source.objects.filter(pk=state.source.pk).update(last_perm_synced_at=timezone.now())
    logger.info(
        "Synced %s (%s) in %.1f s: %s, permissions %s",
        state.source,
        scope,
        time.perf_counter() - state.started,
        state.counts,
        state.permissions.as_dict(),
    )
    return {
        "status": SyncRun.Status.DONE,
        "errors": state.errors[:1000],
        "error": "",
        "progress": {},
        "permissions": state.permissions.as_dict() if scope != SyncRun.Scope.CONTENT else {},
        **state.counts,
    }
