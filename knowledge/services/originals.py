"""Keeping each PDF version's original file (to be shown in the portal's viewer), and an office
version's pictures (``ReadDocument.images``, shown beside citations: ``knowledge.figures``), and
removing them with their document, source or tenant. Where the files live: ``knowledge.originals``.

Files are written and removed only once the transaction that stores or deletes the rows
commits (``transaction.on_commit``): a rolled-back ingestion leaves no file, and a deletion that
fails keeps the files of the rows it kept. A file written is complete or absent (written to a
temporary name, then renamed). Each one counts in the tenant's ``stored_bytes`` quota: their size
is the version's ``original_bytes`` (``original_size``), set when the version is stored, so the
quota's one query (``knowledge.quotas.usage``) counts them with the version's text. (A PDF
figure's picture, rendered when first shown, is not counted: at most ``knowledge.figures.MAX_BYTES``
a figure the reader found.)
"""

from __future__ import annotations

import logging
import os
import shutil
import tempfile
from functools import partial
from pathlib import Path

import numpy as np
from django.db import transaction

from knowledge.ingestion.documents import ReadDocument
from knowledge.models import DocumentVersion
from knowledge.originals import (
    document_originals_folder,
    figure_path,
    original_path,
    regions_path,
    tenant_originals_folder,
)
from knowledge.pages import regions_array

logger = logging.getLogger(__name__)

# The most line boxes a version's layout keeps (the readers' cap too): past it, none are kept.
MAX_REGIONS = 50_000


def original_size(read: ReadDocument) -> int:
    """The size in bytes of the files ``original_keep`` keeps for ``read``, its original and its
    pictures (0: none kept): what its version's ``original_bytes`` holds and the ``stored_bytes``
    quota counts."""
    return len(read.original or b"") + sum(len(png) for png in read.images)


def original_keep(*, version: DocumentVersion, read: ReadDocument) -> None:
    """Keep ``read``'s original file (``read.original``; nothing when it is ``None``) as
    ``version``'s, with its line boxes (``read.metadata["regions"]``, when well formed and at most
    ``MAX_REGIONS``), and its pictures (``read.images``, as ``<number>.figure-<index>.png``), once
    the current transaction commits. Call inside the transaction that stores ``version``, created
    with ``original_bytes=original_size(read)``."""
    where = {"tenant_id": version.tenant_id, "document_id": version.document_id, "number": version.number}
    if read.images:
        pictures = [(figure_path(**where, index=index), png) for index, png in enumerate(read.images)]
        transaction.on_commit(partial(_pictures_write, pictures))
    if not read.original:
        return
    regions = regions_array((read.metadata or {}).get("regions"))
    if regions is not None and len(regions) > MAX_REGIONS:
        regions = None
    transaction.on_commit(partial(_write, original_path(**where), read.original, regions_path(**where), regions))


def _write(path: Path, data: bytes, regions_file: Path, regions: np.ndarray | None) -> None:
    """Write the original and its line boxes (each to a temporary name, then renamed). A failure
    is logged, not raised: the version is stored, and the portal then shows its document page."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        if regions is not None:
            _replace(regions_file, lambda file: np.save(file, regions, allow_pickle=False))
        _replace(path, lambda file: file.write(data))
    except OSError:
        logger.exception("The original file %s could not be written", path)


def _pictures_write(pictures: list[tuple[Path, bytes]]) -> None:
    """Write each ``(path, png)`` (to a temporary name, then renamed). A failure is logged, not
    raised: the version is stored, and its figures then show no picture."""
    for path, png in pictures:
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            _replace(path, lambda file, png=png: file.write(png))
        except OSError:
            logger.exception("The figure %s could not be written", path)


def _replace(path: Path, write) -> None:
    """``write(file)`` into a temporary file beside ``path``, then rename it to ``path``."""
    handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=".", suffix=".part")
    try:
        with os.fdopen(handle, "wb") as file:
            write(file)
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


def document_originals_remove(*, tenant_id: int, document_ids: list[int]) -> None:
    """Remove the original files of every version of ``document_ids`` once the current transaction
    commits (at once outside one)."""
    folders = [document_originals_folder(tenant_id=tenant_id, document_id=pk) for pk in document_ids]
    if folders:
        transaction.on_commit(partial(_folders_remove, folders))


def tenant_originals_remove(*, tenant_id: int) -> None:
    """Remove every original file of tenant ``tenant_id`` once the current transaction commits."""
    transaction.on_commit(partial(_folders_remove, [tenant_originals_folder(tenant_id)]))


def _folders_remove(folders: list[Path]) -> None:
    for folder in folders:
        shutil.rmtree(folder, ignore_errors=True)
