"""What the file and service syncs share: ingesting a batch of items (a bad one failing alone),
ids another source already holds, the counts and the progress a running sync shows."""

from __future__ import annotations

from core.errors import InvalidInput
from core.models import Tenant
from knowledge.connectors import Item
from knowledge.ingestion.readers import ReadDocument
from knowledge.models import Document, Source
from knowledge.services.ingestion import IngestReport, documents_ingest

# Documents per ingestion call: small enough that a bad one costs little to isolate, large
# enough that embedding batches stay full and each call's upkeep (ANALYZE, VACUUM) stays rare.
BATCH_DOCUMENTS = 64


def sync_progress(*, items: int, done: int, chunks: int, seconds: float) -> dict:
    """A running sync's ``progress`` while it ingests: ``{"stage": "ingesting", "items", "done",
    "chunks", "chunks_per_s", "eta_s"}``.

    ``items`` changed files to read, ``done`` of them ingested so far, holding ``chunks`` new chunks,
    in ``seconds`` (wall time since ingesting began). ``chunks_per_s`` (1 decimal) and ``eta_s``
    (whole seconds left at the rate so far, per file) are None until a file is done.
    """
    rate = chunks / seconds if done and seconds > 0 else None
    eta = round(seconds / done * (items - done)) if done and seconds > 0 else None
    return {
        "stage": "ingesting",
        "items": items,
        "done": done,
        "chunks": chunks,
        "chunks_per_s": None if rate is None else round(rate, 1),
        "eta_s": eta,
    }


def own_ids_only(tenant: Tenant, source: Source, items: list[Item], counts: dict, errors: list) -> list[Item]:
    """Drop (as failed) the items holding a document id another source of the tenant already has."""
    ids = [d.external_id for item in items for d in item.documents]
    taken = dict(
        Document.objects.filter(tenant=tenant, external_id__in=ids)
        .exclude(source=source)
        .values_list("external_id", "source__name")
    )
    kept = []
    for item in items:
        clash = next((d.external_id for d in item.documents if d.external_id in taken), None)
        if clash is None:
            kept.append(item)
            continue
        counts["failed"] += 1
        errors.append(
            {
                "document": item.key,
                "error": f"{clash}: the source {taken[clash]!r} already has a document with this id.",
            }
        )
    return kept


def ingest_isolating(tenant, source, items: list[Item], counts: dict, errors: list, on_stored=None):
    """Ingest ``items`` in one call; if it fails on bad input, item by item. Yields (items, report).

    ``on_stored(items)`` (if given) makes the ``documents_ingest`` hook for a group of items: it
    runs inside the storing transaction (a synced document's key and permissions are written
    with it).
    """
    documents: list[ReadDocument] = [d for item in items for d in item.documents]
    hook = on_stored or (lambda group: None)
    try:
        report = documents_ingest(tenant=tenant, source=source, documents=documents, on_stored=hook(items))
    except InvalidInput as exc:
        if len(items) == 1:
            counts["failed"] += 1
            errors.append({"document": items[0].key, "error": exc.message})
            return
    else:
        yield items, report
        return
    for item in items:
        try:
            yield (
                [item],
                documents_ingest(tenant=tenant, source=source, documents=item.documents, on_stored=hook([item])),
            )
        except InvalidInput as exc:
            counts["failed"] += 1
            errors.append({"document": item.key, "error": exc.message})


def outcomes_count(report: IngestReport, counts: dict) -> None:
    for outcome in report.outcomes:
        if outcome.status == "unchanged":
            counts["unchanged"] += 1
        elif outcome.status == "created" or (outcome.status == "duplicate" and outcome.version == 1):
            counts["new"] += 1
        else:
            counts["updated"] += 1
