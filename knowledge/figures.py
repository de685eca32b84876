"""Figures of documents: which figures a cited passage holds, and each one's picture, cropped from
its page of a kept PDF original or, for an office file, kept when its version was stored.

The PDF reader (``knowledge.ingestion.pdf``) writes each captioned figure into the text as one
line ``[Figure: <caption>]`` and lists it in ``ReadDocument.metadata["figures"]``: ``{"page": p
(1-based), "bbox": [x0, top, x1, bottom] (the picture without its caption, PDF points from the
page's top-left corner), "caption", "start", "end"}``. The office readers (.docx, .pptx, .odt:
``knowledge.ingestion.office_images``) keep each picture they keep as text, ``[Image: <OCR or
alternative text>]``, as a PNG too (at most 50 a document) and list it without a box: ``{"index",
"caption", "page" (a .pptx's slide, else None), "start", "end", "marker" (the first line of its
``[Image: ...`` text), "width", "height" (the PNG's pixels)}``. The document row keeps that list
for its current version (``knowledge.pages.document_metadata``), so the figures are known for a
document's current version only; an earlier version's are not (no figure is better than another
version's).

A PDF figure's picture is rendered on request from the kept original (``knowledge.originals``)
with pypdfium2, in a child process under the parsing limits (``knowledge.ingestion.sandbox``: a
damaged or hostile PDF costs the child, never the web process), at a scale that fits
``MAX_SIDE_PX`` on its longer side (never more than ``MAX_SCALE``: 144 DPI) and, when the PNG
still passes ``MAX_BYTES``, at half that until it fits. It is then kept beside the original as
``<number>.figure-<index>.png`` (written to a temporary name, then renamed), so it is rendered
once; it goes with the document's folder. An office picture is written under that same name when
its version is stored (``knowledge.services.originals``; counted in the ``stored_bytes`` quota),
scaled to the same bounds in the parse sandbox, and is served from there: no original is needed.
A kept picture stays right for its version after a newer version comes (a version's figures
never change), so it is served then too.
"""

from __future__ import annotations

import io
import logging
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path

from core.errors import InvalidInput, NotFound
from core.models import Tenant
from knowledge.access import access_scope_get, documents_visible
from knowledge.ingestion.office_images import MAX_BYTES, MAX_SIDE_PX
from knowledge.ingestion.sandbox import parse_isolated
from knowledge.models import Document, DocumentVersion
from knowledge.originals import figure_path, original_path, version_visible_get

logger = logging.getLogger(__name__)

# MAX_SIDE_PX and MAX_BYTES (a picture's longest side in pixels, the most bytes of its PNG) are
# the office readers' bounds too: ``knowledge.ingestion.office_images`` holds them.
__all__ = ["MAX_BYTES", "MAX_SIDE_PX", "Figure", "figure_image_get", "figure_path", "figures_of"]
# At most 2 pixels a point (144 DPI): a small figure is not blown up past what its page shows.
MAX_SCALE = 2.0
# Smaller sides (points) are no figure to show (the reader never keeps such pictures).
MIN_SIDE_PT = 4.0
# The first words of an office picture's line (``knowledge.ingestion.office_images``).
IMAGE_MARKER = "[Image: "


@dataclass(frozen=True)
class Figure:
    """One figure of a document version: its ``index`` in the version's figure list (what its
    picture's URL names), ``caption`` and ``page`` (1-based; ``None`` for an office picture
    outside a .pptx). A PDF figure has its ``bbox`` ``(x0, top, x1, bottom)`` (PDF points from the
    page's top-left corner); an office picture has none, but its PNG's ``size`` (pixels) and the
    first ``line`` of its ``[Image: ...`` text. ``width``/``height``: its size in either unit."""

    index: int
    caption: str
    page: int | None
    bbox: tuple[float, float, float, float] | None = None
    size: tuple[int, int] | None = None
    line: str = ""

    @property
    def is_stored(self) -> bool:
        """Whether its picture was kept when its version was stored (an office picture), rather
        than rendered from the PDF original on request."""
        return self.bbox is None

    @property
    def width(self) -> float:
        return self.bbox[2] - self.bbox[0] if self.bbox else float(self.size[0] if self.size else 1)

    @property
    def height(self) -> float:
        return self.bbox[3] - self.bbox[1] if self.bbox else float(self.size[1] if self.size else 1)

    @property
    def marker(self) -> str:
        """What a passage holding the figure holds: its ``[Figure: <caption>]`` line (PDF) or the
        first line of its ``[Image: ...`` text (office)."""
        return self.line or f"[Figure: {self.caption}]"


def figures_of(metadata: dict | None) -> list[Figure]:
    """The well-formed figures of a reader's (or document row's) ``metadata["figures"]``, each with
    its index in that list (module docstring for both shapes); one with a missing caption, a PDF
    figure whose page is not a positive int or whose box is not four numbers at least
    ``MIN_SIDE_PT`` apart, or an office picture without its ``[Image: `` marker or a positive
    size, is left out (its index is not reused)."""
    figures = []
    for index, item in enumerate((metadata or {}).get("figures") or []):
        if not isinstance(item, dict) or not isinstance(item.get("caption"), str) or not item["caption"]:
            continue
        figure = _pdf_figure(index, item) if "bbox" in item else _office_figure(index, item)
        if figure is not None:
            figures.append(figure)
    return figures


def _pdf_figure(index: int, item: dict) -> Figure | None:
    page, bbox = item.get("page"), item.get("bbox")
    if type(page) is not int or page < 1:
        return None
    if not isinstance(bbox, list) or len(bbox) != 4 or not all(isinstance(v, int | float) for v in bbox):
        return None
    x0, top, x1, bottom = (float(v) for v in bbox)
    if x1 - x0 < MIN_SIDE_PT or bottom - top < MIN_SIDE_PT:
        return None
    return Figure(index=index, caption=item["caption"], page=page, bbox=(x0, top, x1, bottom))


def _office_figure(index: int, item: dict) -> Figure | None:
    page, marker, width, height = item.get("page"), item.get("marker"), item.get("width"), item.get("height")
    if page is not None and (type(page) is not int or page < 1):
        return None
    if not isinstance(marker, str) or not marker.startswith(IMAGE_MARKER):
        return None
    if type(width) is not int or type(height) is not int or width < 1 or height < 1:
        return None
    return Figure(index=index, caption=item["caption"], page=page, size=(width, height), line=marker)


def passage_figures_get(*, tenant: Tenant, user, citations: list[dict]) -> dict[int, list[Figure]]:
    """The figures each cited passage holds, by citation number: ``citations`` are an answer's
    (``retrieval.types.Citation.as_dict()``: ``n``, ``document_id``, ``version``, ``kind``,
    ``text``). A passage holds a figure when its text holds the figure's ``marker``, its version is
    its document's current one, and the picture can be had: the version's original is kept (a
    PDF figure), or its picture is (an office one). Documents ``user`` may not see give none. Two
    queries (plus the access scope's one); citations without figures are left out.
    ``PermissionDenied`` when ``user`` is not a member of ``tenant``."""
    wanted = {
        c["document_id"]
        for c in citations
        if c.get("kind", "body") == "body" and ("[Figure: " in c.get("text", "") or IMAGE_MARKER in c.get("text", ""))
    }
    if not wanted:
        return {}
    scope = access_scope_get(tenant=tenant, user=user)
    documents = documents_visible(Document.objects.for_tenant(tenant), scope).filter(pk__in=wanted)
    metadata = {pk: {"figures": figures} for pk, figures in documents.values_list("pk", "metadata__figures")}
    current = dict(
        DocumentVersion.objects.for_tenant(tenant)
        .filter(document_id__in=metadata, is_current=True)
        .values_list("document_id", "number")
    )
    found: dict[int, list[Figure]] = {}
    for citation in citations:
        document_id, number = citation["document_id"], citation.get("version")
        if document_id not in metadata or current.get(document_id) != number:
            continue
        where = {"tenant_id": tenant.pk, "document_id": document_id, "number": number}
        text = citation.get("text", "")
        figures = [
            figure
            for figure in figures_of(metadata[document_id])
            if figure.marker in text
            and (figure_path(**where, index=figure.index) if figure.is_stored else original_path(**where)).is_file()
        ]
        if figures:
            found[citation["n"]] = figures
    return found


def figure_image_get(*, tenant: Tenant, user, document_id: int, number: int, index: int) -> bytes:
    """The PNG of figure ``index`` of version ``number`` of document ``document_id`` (module
    docstring: at most ``MAX_SIDE_PX`` a side and ``MAX_BYTES``), when ``user`` may see the
    document: the kept picture (an office picture, or a PDF figure rendered before), else rendered
    from the kept PDF original. ``NotFound`` for a document of another tenant, one hidden from
    ``user``, a version it does not have, no such picture kept and no original to render it from,
    or no such figure (a version no longer current has its figures only once rendered), and when
    the original cannot be rendered (logged with ``knowledge.ingestion.sandbox``'s reason);
    ``PermissionDenied`` for a non-member."""
    version = version_visible_get(tenant=tenant, user=user, document_id=document_id, number=number)
    where = {"tenant_id": tenant.pk, "document_id": document_id, "number": version.number}
    kept = figure_path(**where, index=index)
    try:
        return kept.read_bytes()
    except OSError:
        pass
    original = original_path(**where)
    figure = next((f for f in figures_of(version.document.metadata) if f.index == index), None)
    if figure is None or figure.is_stored or not version.is_current or not original.is_file():
        raise NotFound(f"Document {document_id}, version {number}, has no figure {index} to show.")
    try:
        png = parse_isolated(
            lambda: figure_png(original.read_bytes(), figure),
            name=f"figure {index} of document {document_id}",
            preload=("pypdfium2",),
        )
    except InvalidInput as exc:  # to a reader, a figure that cannot be shown is one that is not there
        logger.warning("Figure %s of document %s, version %s, was not rendered: %s", index, document_id, number, exc)
        raise NotFound("That figure cannot be shown.") from exc
    _keep(kept, png)
    return png


def figure_png(pdf: bytes, figure: Figure) -> bytes:
    """``figure``'s box of its page of ``pdf`` as a PNG (module docstring for its size). Raises
    ``NotFound`` when the PDF has no such page; pypdfium2's errors pass through (the sandbox turns
    them into ``parse_failed``)."""
    import pypdfium2 as pdfium

    if figure.bbox is None:
        raise NotFound(f"Figure {figure.index} is no PDF figure.")
    document = pdfium.PdfDocument(pdf)
    try:
        if figure.page > len(document):
            raise NotFound(f"The PDF has no page {figure.page}.")
        page = document[figure.page - 1]
        width, height = page.get_size()
        x0, top = max(figure.bbox[0], 0.0), max(figure.bbox[1], 0.0)
        x1, bottom = min(figure.bbox[2], width), min(figure.bbox[3], height)
        if x1 - x0 < MIN_SIDE_PT or bottom - top < MIN_SIDE_PT:
            raise NotFound(f"Figure {figure.index} lies outside its page.")
        scale = min(MAX_SCALE, MAX_SIDE_PX / max(x1 - x0, bottom - top))
        while True:
            # crop: the points cut from the left, bottom, right and top of the page
            bitmap = page.render(scale=scale, crop=(x0, height - bottom, width - x1, top))
            out = io.BytesIO()
            bitmap.to_pil().convert("RGB").save(out, format="PNG", optimize=True)
            if out.tell() <= MAX_BYTES or scale * max(x1 - x0, bottom - top) < 64:
                return out.getvalue()
            scale /= 2
    finally:
        document.close()


def _keep(path: Path, png: bytes) -> None:
    """Write ``png`` to ``path`` (a temporary name, then renamed); a failure is logged only (the
    picture is rendered again next time)."""
    try:
        handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=".", suffix=".part")
    except OSError:
        logger.exception("The figure %s could not be kept", path)
        return
    try:
        with os.fdopen(handle, "wb") as file:
            file.write(png)
        os.replace(temporary, path)
    except OSError:
        Path(temporary).unlink(missing_ok=True)
        logger.exception("The figure %s could not be kept", path)
