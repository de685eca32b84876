"""Documents as they were made: the original file of each version of a PDF, kept to be shown, and
the reads of it (the portal's viewer opens a cited page there).

Where: ``<KB_DATA_DIR>/files/<tenant id>/<document id>/<version number>.pdf``, and beside it
``<number>.regions.npy``, the version's line boxes (``knowledge.pages``: ``[page, x0, top, x1,
bottom, start, end]`` a row, float64, NumPy's ``.npy`` format without pickles: 50,000 lines load
in milliseconds, where the same as JSON took hundreds), and ``<number>.figure-<index>.png``, the
pictures of its figures (``knowledge.figures``: an office file's are written with the version, a
PDF's when first shown). They are written once the version's transaction commits and removed with
the document, its source or its tenant (``knowledge.services.originals``). A version ingested
before originals were kept, or of a format whose original is not kept (anything but PDF), has no
original: callers fall back to the document page.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from django.conf import settings

from core.errors import NotFound
from core.models import Tenant
from knowledge.access import access_scope_get, documents_visible
from knowledge.models import Chunk, Document, DocumentVersion
from knowledge.pages import chunk_pages, regions_on_pages

ORIGINALS_FOLDER = "files"
ORIGINAL_SUFFIX = ".pdf"
REGIONS_SUFFIX = ".regions.npy"
FIGURE_SUFFIX = ".png"


def tenant_originals_folder(tenant_id: int) -> Path:
    """The folder of every original file of tenant ``tenant_id``."""
    return Path(settings.KB_DATA_DIR) / ORIGINALS_FOLDER / str(int(tenant_id))


def document_originals_folder(*, tenant_id: int, document_id: int) -> Path:
    """The folder of the original files of one document's versions."""
    return tenant_originals_folder(tenant_id) / str(int(document_id))


def original_path(*, tenant_id: int, document_id: int, number: int) -> Path:
    """The original file of version ``number`` of a document (it may not exist)."""
    return document_originals_folder(tenant_id=tenant_id, document_id=document_id) / f"{int(number)}{ORIGINAL_SUFFIX}"


def regions_path(*, tenant_id: int, document_id: int, number: int) -> Path:
    """The line boxes of version ``number`` of a document (it may not exist)."""
    return document_originals_folder(tenant_id=tenant_id, document_id=document_id) / f"{int(number)}{REGIONS_SUFFIX}"


def figure_path(*, tenant_id: int, document_id: int, number: int, index: int) -> Path:
    """The picture of figure ``index`` of version ``number`` of a document (it may not exist)."""
    folder = document_originals_folder(tenant_id=tenant_id, document_id=document_id)
    return folder / f"{int(number)}.figure-{int(index)}{FIGURE_SUFFIX}"


@dataclass
class CitedPage:
    """Where a chunk of a kept PDF is: the ``document``, its ``version``, the ``chunk`` (``None``
    when that chunk no longer exists), its pages (1-based; ``None`` without pages), ``boxes``:
    ``{page: [[x0, top, x1, bottom], ...]}`` of the lines the chunk covers (PDF points from the
    page's top-left corner; empty when the version has no line boxes), and ``original``, the path
    of the kept file or ``None`` when there is none."""

    document: Document
    version: DocumentVersion
    chunk: Chunk | None
    page: int | None
    page_end: int | None
    original: Path | None
    boxes: dict[int, list[list[float]]] = field(default_factory=dict)


def version_visible_get(*, tenant: Tenant, user, document_id: int, number: int | None) -> DocumentVersion:
    """Version ``number`` (``None``: the current one) of document ``document_id`` of ``tenant`` with
    its document (``version.document``), when ``user`` may see the document; ``NotFound``
    otherwise (the same words for a hidden one); ``PermissionDenied`` for a non-member."""
    scope = access_scope_get(tenant=tenant, user=user)
    document = documents_visible(Document.objects.for_tenant(tenant), scope).filter(pk=document_id).first()
    version = None
    if document is not None:
        versions = DocumentVersion.objects.for_tenant(tenant).filter(document=document).defer("text")
        version = versions.filter(is_current=True).first() if number is None else versions.filter(number=number).first()
    if version is None:
        raise NotFound(f"Document {document_id} has no such version that you may see.")
    version.document = document
    return version


def original_get(*, tenant: Tenant, user, document_id: int, number: int) -> Path:
    """The kept original file of version ``number`` of document ``document_id``, when ``user`` may
    see the document (``knowledge.access``). ``NotFound`` for a document of another tenant, one
    hidden from ``user``, a version it does not have, or a version whose original is not kept;
    ``PermissionDenied`` when ``user`` is not a member of ``tenant``."""
    version = version_visible_get(tenant=tenant, user=user, document_id=document_id, number=number)
    path = original_path(tenant_id=tenant.pk, document_id=document_id, number=version.number)
    if not path.is_file():
        raise NotFound(f"The original file of document {document_id}, version {number}, is not kept.")
    return path


def cited_page_get(*, tenant: Tenant, user, document_id: int, number: int | None, ordinal: int | None) -> CitedPage:
    """Where chunk ``ordinal`` of version ``number`` (``None``: the current one) of document
    ``document_id`` is in the version's kept original (``CitedPage``). ``NotFound`` as ``original_get`` for a document ``user`` may
    not see or a version it does not have; a version without a kept original, or a chunk that is
    gone, still answers (``original`` or ``chunk`` ``None``), for the caller to fall back."""
    version = version_visible_get(tenant=tenant, user=user, document_id=document_id, number=number)
    chunk = None
    if ordinal is not None:
        chunk = (
            Chunk.objects.for_tenant(tenant)
            .filter(version=version, ordinal=ordinal)
            .only("id", "version_id", "ordinal", "kind", "text", "char_start", "char_end", "metadata")
            .first()
        )
    pages = chunk_pages(chunk) if chunk is not None else {"page": None, "page_end": None}
    path = original_path(tenant_id=tenant.pk, document_id=document_id, number=version.number)
    cited = CitedPage(
        document=version.document,
        version=version,
        chunk=chunk,
        page=pages["page"],
        page_end=pages["page_end"],
        original=path if path.is_file() else None,
    )
    if cited.original is not None and chunk is not None and chunk.kind == Chunk.Kind.BODY:
        regions = regions_get(tenant_id=tenant.pk, document_id=document_id, number=version.number)
        cited.boxes = regions_on_pages(regions, chunk.char_start, chunk.char_end)
    return cited


def regions_get(*, tenant_id: int, document_id: int, number: int) -> np.ndarray:
    """A version's kept line boxes (an ``(n, 7)`` array); an empty one when there are none or the
    file cannot be read."""
    try:
        regions = np.load(regions_path(tenant_id=tenant_id, document_id=document_id, number=number), allow_pickle=False)
    except (OSError, ValueError):
        return np.empty((0, 7))
    return regions if regions.ndim == 2 and regions.shape[1] == 7 else np.empty((0, 7))
