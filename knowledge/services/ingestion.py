"""Ingestion: read documents become versions, chunks and embeddings.

Ingestion is idempotent and versioned:

* content is normalized and hashed (SHA-256); a document whose current version has the same
  hash is left alone ("unchanged");
* content equal to another document's current version in the tenant is stored as a version
  with ``duplicate_of`` set and gets no chunks or embeddings ("duplicate");
* otherwise a new version is stored with its chunks, and the old version's chunks stay, marked
  not current (``Chunk.is_current``), in the same transaction: default search sees either the
  old or the new chunks, never a mix, and ``as_of`` search still finds the old ones
  (``docs/versions.md``); the source's ``versions_kept`` then drops the chunks of versions
  beyond the newest old ones it keeps (``knowledge.services.versions``);
* when a version that other documents duplicate is replaced, its chunks are copied to the first
  of those duplicates (which becomes an ordinary version) and the others are re-pointed at it, so
  the duplicated content stays searchable without a moment's gap.

Embedding (slow) happens before any transaction opens; then every document of the call is stored
in one transaction (each under a row lock on its document): a call stores all of its documents or,
when any of them fails, none. With ``KB_EMBED_QUEUE`` set, embedding moves to a task of its own on
that queue, after the commit (``knowledge.services.embeddings``).

This module prepares and embeds a call's documents and stores them in one transaction;
``knowledge.services.version_store`` stores each one as a version with its chunks, and
``knowledge.services.ingest_reports`` holds what a call reports.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from fnmatch import fnmatch
from pathlib import Path

import numpy as np
from django.conf import settings
from django.db import connection, transaction
from django.db.models import Exists, OuterRef

from core import metrics
from core.errors import InvalidInput
from core.models import Tenant
from core.queue import task_enqueue
from core.replicas import replica_write_mark
from knowledge import task_names
from knowledge.embedders import Embedder, get_embedder
from knowledge.enrichment.services import enrichment_enqueue
from knowledge.ingestion.readers import SUPPORTED_EXTENSIONS, ReadDocument, read_path
from knowledge.ingestion.splitters import Splitter, get_splitter
from knowledge.models import Chunk, DocumentVersion, Source
from knowledge.quotas import quota_check, quota_check_early, quota_limits
from knowledge.services.embeddings import (
    chunks_embed_enqueue,
    embedding_deferred,
    embedding_input,
)
from knowledge.services.ingest_reports import IngestNote, IngestOutcome, IngestReport, ocr_budget_notes
from knowledge.services.maintenance import tables_maintain_enqueue
from knowledge.services.originals import original_size
from knowledge.services.version_store import (
    Prepared,
    content_hash,
    current_version_id,
    prepared_store,
    version_chunks_pass_on,
    version_reindex,
)
from knowledge.services.versions import versions_prune
from knowledge.summaries.services import summaries_enqueue
from knowledge.vector_index import tenant_vector_index_ensure, vector_index_ensure

# Names callers import from here (``knowledge.services`` re-exports them too).
__all__ = [
    "IngestNote",
    "IngestOutcome",
    "IngestReport",
    "collect_files",
    "content_hash",
    "documents_ingest",
    "embedding_input",
    "near_duplicates_enqueue",
    "paths_ingest",
    "version_chunks_pass_on",
    "version_reindex",
]

# Bulk loads of at least this many chunks refresh planner statistics (~0.3 s on 10k chunks,
# against seconds of embedding), so the first searches after them get good plans.
ANALYZE_AFTER_CHUNKS = 200


def _current_hashes(tenant: Tenant, prepared: list[Prepared], source: Source) -> tuple[dict[str, str], dict[str, int]]:
    """(external_id -> current hash of that document, hash -> a current version id in the tenant).

    Files attached to conversations (``knowledge.attachments``) are never duplicates, nor
    originals of one: each keeps its own chunks, private to its member.
    """
    external_ids = [p.read.external_id for p in prepared]
    hashes = {p.hash for p in prepared}
    current = DocumentVersion.objects.for_tenant(tenant).filter(is_current=True)
    by_document = dict(
        current.filter(document__external_id__in=external_ids).values_list("document__external_id", "content_hash")
    )
    if source.kind == Source.Kind.CONVERSATION:
        return by_document, {}
    originals = current.filter(content_hash__in=hashes, duplicate_of__isnull=True).exclude(
        document__source__kind=Source.Kind.CONVERSATION
    )
    by_hash = dict(originals.values_list("content_hash", "id"))
    return by_document, by_hash


def documents_ingest(
    *,
    tenant: Tenant,
    source: Source,
    documents: list[ReadDocument],
    splitter: Splitter | None = None,
    embedder: Embedder | None = None,
    progress: bool = False,
    on_progress: Callable[[dict], None] | None = None,
    on_stored: Callable[[IngestReport], None] | None = None,
) -> IngestReport:
    """Ingest already-read documents into ``source`` of ``tenant``. Returns an ``IngestReport``.

    All or nothing: embeddings are computed first (outside any transaction), then every document
    is stored in one transaction, so a failure on any document stores none of them. With
    ``KB_EMBED_QUEUE`` set and no ``embedder`` given, the chunks are stored without embeddings
    and ``knowledge.tasks.chunks_embed_task`` is queued on that queue once the call commits
    (``knowledge.services.embeddings``); ``embed_seconds`` is then 0. Raises
    ``InvalidInput`` when ``source`` is another tenant's, two documents share an id, a document
    has no text to index or the database refuses a document (named; the database's own message
    is only logged), and ``QuotaExceeded`` (``knowledge.quotas``, 403) when storing them would take the
    tenant past its documents, stored bytes, chunks or sources limit (checked before embedding,
    and again under the tenant's quota lock before the first write). Transient database errors
    (``django.db.OperationalError``) and embedding endpoint failures (``UpstreamError``)
    propagate unchanged, for the caller to retry.

    ``progress`` shows a progress bar; ``on_progress`` (if given) is called with
    ``{"stage": "embedding" | "storing", "documents": n, "chunks_total": c, "chunks_embedded": e}``
    after each embedding batch and once before storing. ``on_stored`` (if given) is called with
    the report inside the storing transaction, after the last document is stored: what it writes
    (e.g. a synced document's access rules) commits with the documents or not at all. The
    report's ``notes`` name the documents whose scanned pages went past the OCR budget
    (``ocr_budget_notes``); they fail nothing.
    """
    started = time.perf_counter()
    ids = _documents_check(tenant=tenant, source=source, documents=documents)
    prepared, by_document, by_hash = _documents_prepare(
        tenant=tenant, source=source, documents=documents, splitter=splitter or get_splitter()
    )
    adding = _quota_adding(tenant=tenant, source=source, prepared=prepared, current=by_document)
    quota_check_early(tenant=tenant, **adding)  # before embedding: a call over a limit costs nothing
    # KB_EMBED_QUEUE set: the chunks are stored without embeddings, for the embedding task.
    deferred = embedder is None and embedding_deferred()
    embedder_key = embedder.key if embedder else tenant.embedder
    embed_seconds = _documents_embed(
        tenant=tenant,
        prepared=prepared,
        embedder=embedder,
        deferred=deferred,
        progress=progress,
        on_progress=on_progress,
    )
    report = IngestReport(embed_seconds=embed_seconds, notes=ocr_budget_notes(documents))
    with transaction.atomic():
        quota_check(tenant=tenant, **adding)  # again, under the tenant's quota lock, before any write
        if source.pk is None:  # a new source is stored with its first documents, or not at all
            source.save()
        _documents_store(
            tenant=tenant, source=source, prepared=prepared, by_hash=by_hash, embedder_key=embedder_key, report=report
        )
        if on_stored is not None:
            on_stored(report)
    position = {external_id: i for i, external_id in enumerate(ids)}
    report.outcomes.sort(key=lambda o: position[o.external_id])
    _after_storing(tenant=tenant, source=source, report=report, deferred=deferred, embedder_key=embedder_key)
    report.total_seconds = time.perf_counter() - started
    metrics.ingestion_observe(counts=report.counts(), seconds=report.total_seconds)
    return report


def _documents_check(*, tenant: Tenant, source: Source, documents: list[ReadDocument]) -> list[str]:
    """The documents' ids, in order; ``InvalidInput`` when ``source`` is another tenant's or two share an id."""
    if source.tenant_id != tenant.pk:
        raise InvalidInput("The source belongs to another tenant.")
    ids = [d.external_id for d in documents]
    if len(set(ids)) != len(ids):
        raise InvalidInput("Two documents in one ingestion share an external id.")
    return ids


def _documents_prepare(
    *, tenant: Tenant, source: Source, documents: list[ReadDocument], splitter: Splitter
) -> tuple[list[Prepared], dict[str, str], dict[str, int]]:
    """Hash each document and sort it: ``unchanged`` (its current version has that hash),
    ``duplicate`` (a current version in the tenant, or an earlier document of the call, has it) or
    ``new`` (split into spans). Returns the prepared documents and ``_current_hashes``'s two maps."""
    prepared = [Prepared(read=d, hash=content_hash(d.text)) for d in documents]
    by_document, by_hash = _current_hashes(tenant, prepared, source)
    first_in_batch: dict[str, Prepared] = {}
    for item in prepared:
        if by_document.get(item.read.external_id) == item.hash:
            item.status = "unchanged"
        elif item.hash in by_hash or item.hash in first_in_batch:
            item.status = "duplicate"
        else:
            item.status = "new"
            first_in_batch[item.hash] = item
            item.spans = splitter.split(item.read)
    return prepared, by_document, by_hash


def _documents_embed(
    *,
    tenant: Tenant,
    prepared: list[Prepared],
    embedder: Embedder | None,
    deferred: bool,
    progress: bool,
    on_progress: Callable[[dict], None] | None,
) -> float:
    """Embed the new documents' spans (unless ``deferred``) and report the storing stage to
    ``on_progress``. Returns the seconds spent embedding (0 when deferred)."""
    to_embed = [item for item in prepared if item.status == "new" and item.spans]
    embed_started = time.perf_counter()
    if to_embed and not deferred:
        embedder = embedder or get_embedder(tenant.embedder)
        _embed_all(to_embed, embedder, progress=progress, on_progress=on_progress, documents=len(prepared))
        vector_index_ensure(embedder_key=embedder.key, dimensions=embedder.dimensions)
    embed_seconds = 0.0 if deferred else time.perf_counter() - embed_started
    if on_progress is not None:
        chunks = sum(len(item.spans) for item in to_embed)
        embedded = 0 if deferred else chunks
        on_progress(
            {"stage": "storing", "documents": len(prepared), "chunks_total": chunks, "chunks_embedded": embedded}
        )
    return embed_seconds


def _documents_store(
    *,
    tenant: Tenant,
    source: Source,
    prepared: list[Prepared],
    by_hash: dict[str, int],
    embedder_key: str,
    report: IngestReport,
) -> None:
    """Store every prepared document (inside the caller's transaction), adding its outcome to ``report``.

    Duplicates of versions stored before this call go first: when this call replaces such a
    version, its chunks then move to them. Duplicates of documents new in this call go last,
    once those have versions.
    """
    stored_by_hash: dict[str, int] = dict(by_hash)
    order = {"duplicate": 2, "new": 1, "unchanged": 1}
    ordered = sorted(
        prepared,
        key=lambda p: (0 if p.status == "duplicate" and p.hash in by_hash else order[p.status], p.read.external_id),
    )
    for item in ordered:
        outcome = prepared_store(
            tenant=tenant,
            source=source,
            item=item,
            embedder_key=embedder_key,
            duplicate_version_id=stored_by_hash.get(item.hash) if item.status == "duplicate" else None,
        )
        if outcome.status in ("created", "updated"):
            stored_by_hash.setdefault(item.hash, current_version_id(outcome.document_id))
        report.outcomes.append(outcome)


def _after_storing(*, tenant: Tenant, source: Source, report: IngestReport, deferred: bool, embedder_key: str) -> None:
    """What follows a stored call: old versions pruned (``versions_kept``), planner statistics and
    table maintenance, the embedding, near-duplicate, enrichment and summary tasks queued, and
    the tenant's replicas awaited for its next reads."""
    counts = report.counts()
    updated = [o.document_id for o in report.outcomes if o.status in ("updated", "duplicate")]
    if updated and source.versions_kept is not None:
        versions_prune(source=source, document_ids=updated)
    if counts["chunks"] >= ANALYZE_AFTER_CHUNKS:
        # Fresh planner statistics, so the first searches after a bulk load get good plans.
        with connection.cursor() as cursor:
            cursor.execute("ANALYZE knowledge_chunk, knowledge_posting, knowledge_termstatistic")
    if counts["chunks"]:
        tables_maintain_enqueue()  # VACUUM (ANALYZE) in the background, so fresh rows read fast
    if deferred and counts["chunks"]:
        chunks_embed_enqueue(tenant_id=tenant.pk)  # on KB_EMBED_QUEUE; it then sees to the HNSW indexes
    elif not deferred:
        tenant_vector_index_ensure(tenant_id=tenant.pk, embedder_key=embedder_key)  # own HNSW index once large
    near_duplicates_enqueue(tenant=tenant, report=report)
    enrichment_enqueue(tenant=tenant, report=report)
    summaries_enqueue(tenant=tenant, report=report)
    if counts["created"] or counts["updated"]:
        # Everyone's reads in the tenant wait for a replica to replay this (core.replicas).
        transaction.on_commit(lambda: replica_write_mark(tenant_id=tenant.pk))


def _quota_adding(*, tenant: Tenant, source: Source, prepared: list[Prepared], current: dict[str, str]) -> dict:
    """What storing ``prepared`` adds to the tenant's quotas (``knowledge.quotas``): ``documents``
    (ids with no live document yet; ``current`` maps the live ones' ids to their hashes),
    ``stored_bytes`` (the text of every new version and its kept original file), ``chunks`` (the new versions' chunks, plus
    the chunks a replaced version hands on to a document that duplicated it) and ``sources``
    (1 for a source not saved yet)."""
    stored = [item for item in prepared if item.status != "unchanged"]
    adding = {
        "documents": sum(1 for item in stored if item.read.external_id not in current),
        "stored_bytes": sum(len(item.read.text.encode("utf-8")) + original_size(item.read) for item in stored),
        "chunks": sum(len(item.spans) for item in stored if item.status == "new"),
        "sources": 1 if source.pk is None else 0,
    }
    replaced = [item.read.external_id for item in stored if item.read.external_id in current]
    if replaced and quota_limits(tenant=tenant)["chunks"] is not None:
        heirs = DocumentVersion.objects.filter(duplicate_of=OuterRef("version_id"), is_current=True)
        adding["chunks"] += (
            Chunk.objects.for_tenant(tenant)
            .filter(kind=Chunk.Kind.BODY, is_current=True, version__document__external_id__in=replaced)
            .filter(Exists(heirs))
            .count()
        )
    return adding


def near_duplicates_enqueue(*, tenant: Tenant, report: IngestReport) -> None:
    """Queue the near-duplicate search (``knowledge.tasks.near_duplicates_task``) once the
    ingestion commits, when it stored a new version and ``KB_NEAR_DUPLICATES`` is on."""
    if not settings.KB_NEAR_DUPLICATES or not any(o.status != "unchanged" for o in report.outcomes):
        return
    task_enqueue(task_names.NEAR_DUPLICATES, tenant.pk)


def _embed_all(
    items: list[Prepared],
    embedder: Embedder,
    *,
    progress: bool,
    on_progress: Callable[[dict], None] | None = None,
    documents: int = 0,
) -> None:
    """Embed every span of ``items`` in batches spanning documents; fills ``item.vectors``.

    A batch is four of the embedder's batches (``KB_EMBED_BATCH_SIZE`` on the CPU); ``on_progress`` is
    called after each (see ``documents_ingest``).
    """
    from tqdm import tqdm

    texts = [embedding_input(span) for item in items for span in item.spans]
    if not texts:
        return
    batch = 4 * getattr(embedder, "batch_size", settings.KB_EMBED_BATCH_SIZE)
    parts = []
    with tqdm(
        total=len(texts),
        unit="chunk",
        desc="Embedding",
        disable=not progress,
        mininterval=1.0,
    ) as bar:
        for i in range(0, len(texts), batch):
            parts.append(embedder.embed(texts[i : i + batch]))
            bar.update(len(texts[i : i + batch]))
            if on_progress is not None:
                on_progress(
                    {
                        "stage": "embedding",
                        "documents": documents,
                        "chunks_total": len(texts),
                        "chunks_embedded": min(i + batch, len(texts)),
                    }
                )
    vectors = np.concatenate(parts)
    position = 0
    for item in items:
        item.vectors = vectors[position : position + len(item.spans)]
        position += len(item.spans)


def collect_files(
    paths: Iterable[Path], *, root: Path | None = None, exclude: Iterable[str] = ()
) -> list[tuple[Path, Path]]:
    """Expand files and folders into ``(file, root)`` pairs of supported files, sorted.

    ``root`` (ids are relative to it) defaults to the folder given or the file's parent.
    Inside folders, hidden files and folders and paths matching an ``exclude`` glob (matched
    against the path relative to the folder, e.g. ``*/_images/*``) are skipped.
    Raises ``InvalidInput`` for a missing path, a path outside ``root`` or a folder with no
    supported file.
    """
    found: list[tuple[Path, Path]] = []
    for path in map(Path, paths):
        if root is not None and not path.resolve().is_relative_to(root.resolve()):
            raise InvalidInput(f"{path} is not inside --root {root}.")
        if path.is_dir():
            files = sorted(
                p
                for p in path.rglob("*")
                if p.is_file()
                and p.suffix.lower() in SUPPORTED_EXTENSIONS
                and not any(part.startswith(".") for part in p.relative_to(path).parts)
                and not any(fnmatch(str(p.relative_to(path)), pattern) for pattern in exclude)
            )
            if not files:
                raise InvalidInput(f"{path}: no supported files ({', '.join(SUPPORTED_EXTENSIONS)}).")
            found.extend((f.resolve(), (root or path).resolve()) for f in files)
        elif path.is_file():
            found.append((path.resolve(), (root or path.parent).resolve()))
        else:
            raise InvalidInput(f"{path}: no such file or folder.", code="not_found")
    return found


def paths_ingest(
    *,
    tenant: Tenant,
    source: Source,
    paths: Iterable[Path],
    fmt: str | None = None,
    uri_prefix: str = "",
    root: Path | None = None,
    exclude: Iterable[str] = (),
    splitter: Splitter | None = None,
    progress: bool = False,
) -> IngestReport:
    """Read every file under ``paths`` and ingest them (see ``documents_ingest``).

    Document ids are file paths relative to ``root`` (default: each folder given), without
    suffix; ``uri_prefix`` + that id gives each URI.

    Every file is read and validated before anything is stored, so a bad file rejects the
    whole call with ``InvalidInput``/``UnsupportedFileType`` and stores nothing.
    """
    documents: list[ReadDocument] = []
    for file, base in collect_files(paths, root=root, exclude=exclude):
        documents.extend(read_path(file, root=base, uri_prefix=uri_prefix, fmt=fmt))
    return documents_ingest(
        tenant=tenant,
        source=source,
        documents=documents,
        splitter=splitter,
        progress=progress,
    )
