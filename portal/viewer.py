"""The cited page of a PDF, as it was made: the kept original (``knowledge.originals``) rendered by
pdf.js (served with the static files, ``portal/static/portal/vendor/pdfjs/``) with the cited
passage highlighted, and the original file itself.

* ``document_view`` (``/documents/<id>/view/?version=<n>&chunk=<ordinal>``): the viewer page,
  opened at the page the chunk starts on. It passes ``portal/viewer.js`` the file's URL, the pages
  and the boxes of the chunk's lines (``CitedPage.boxes``, from the version's layout); without
  boxes the script marks the text-layer spans the chunk's text holds. A version without a kept
  original (a document ingested before originals were kept, or not a PDF) redirects to the
  document page at the chunk, as citations opened before.
* ``document_original`` (``/documents/<id>/versions/<n>/original.pdf``): the file, ``inline`` as
  ``application/pdf`` with ``X-Content-Type-Options: nosniff``.

Both follow the document's access rules (``knowledge.access``): a document of another tenant, or
one the member may not see, is a 404 like a missing one.
"""

from __future__ import annotations

import re

from csp.constants import SELF
from csp.decorators import csp_update
from django.http import FileResponse, Http404
from django.shortcuts import redirect, render
from django.templatetags.static import static
from django.urls import reverse
from django.utils.cache import patch_cache_control
from django.views.decorators.http import require_GET

from core.errors import NotFound
from core.replicas import replica_reads
from knowledge.models import Chunk
from knowledge.originals import cited_page_get, original_get, original_path
from knowledge.pages import page_label
from portal.decorators import tenant_required

_NUMBER = re.compile(r"[1-9][0-9]{0,8}")  # a version number: ASCII digits, no leading zero
_ORDINAL = re.compile(r"0|[1-9][0-9]{0,8}")  # a chunk's ordinal


def _parameter(request, name: str, pattern: re.Pattern) -> int | None:
    """Query parameter ``name`` as a number (``None`` when absent); 404 when it is malformed (not
    ASCII digits, a leading zero, ten digits or more)."""
    value = request.GET.get(name, "")
    if not value:
        return None
    if not pattern.fullmatch(value):
        raise Http404(f"No such {name}.")
    return int(value)


def document_text_url(document_id: int, number: int | None, ordinal: int | None) -> str:
    """The document page at a version's chunk (the text as the knowledge base holds it)."""
    url = reverse("portal:document", args=[document_id])
    if number is not None:
        url += f"?version={number}"
        if ordinal is not None:
            url += f"#chunk-{ordinal}"
    return url


def viewer_url(document_id: int, number: int, ordinal: int) -> str:
    """The viewer at chunk ``ordinal`` of version ``number`` of a document (``document_view``)."""
    return f"{reverse('portal:document-view', args=[document_id])}?version={number}&chunk={ordinal}"


def cited_url(*, tenant_id: int, document_id: int, number: int | None, ordinal: int | None) -> str:
    """Where a citation opens: the viewer at the chunk when the version's original is kept, else
    the document page at the chunk (``number``/``ordinal`` ``None``: the chunk is gone)."""
    if number is not None and ordinal is not None:
        if original_path(tenant_id=tenant_id, document_id=document_id, number=number).is_file():
            return viewer_url(document_id, number, ordinal)
    return document_text_url(document_id, number, ordinal)


@require_GET
@tenant_required
@replica_reads
@csp_update({"worker-src": [SELF]})  # pdf.js's worker, a module from the static files (what script-src allows)
def document_view(request, tenant, document_id: int):
    """The viewer page at ``?chunk=<ordinal>`` of ``?version=<n>`` (the current version without
    it), or the document page when the version's original is not kept or the chunk is the
    document's summary (on no page). 404 for a document the member may not see, a version it does
    not have, or a malformed number."""
    number = _parameter(request, "version", _NUMBER)
    ordinal = _parameter(request, "chunk", _ORDINAL)
    try:
        cited = cited_page_get(
            tenant=tenant, user=request.user, document_id=document_id, number=number, ordinal=ordinal
        )
    except NotFound as exc:
        raise Http404(exc.message) from exc
    if cited.original is None or (cited.chunk is not None and cited.chunk.kind == Chunk.Kind.SUMMARY):
        return redirect(document_text_url(document_id, cited.version.number, ordinal))
    pdf_url = reverse("portal:document-original", args=[document_id, cited.version.number])
    data = {
        "url": pdf_url,
        "lib": static("portal/vendor/pdfjs/pdf.min.mjs"),
        "worker": static("portal/vendor/pdfjs/pdf.worker.min.mjs"),
        "decoders": static("portal/vendor/pdfjs/wasm/"),  # JBIG2 and JPEG 2000 decoders, in JavaScript
        "page": cited.page or 1,
        "pageEnd": cited.page_end or cited.page or 1,
        "boxes": {str(page): boxes for page, boxes in cited.boxes.items()},
        "text": cited.chunk.text if cited.chunk is not None and cited.page else "",
    }
    context = {
        "document": cited.document,
        "version": cited.version,
        "chunk": cited.chunk,
        "pages": page_label(cited.page, cited.page_end),
        "pdf_url": pdf_url,
        "text_url": document_text_url(document_id, cited.version.number, ordinal),
        "viewer_data": data,
    }
    return render(request, "portal/viewer.html", context)


@require_GET
@tenant_required
def document_original(request, tenant, document_id: int, number: int):
    """Version ``number``'s original PDF, shown in the browser (``inline``). 404 for a document the
    member may not see, a version it does not have, or a version whose original is not kept."""
    try:
        path = original_get(tenant=tenant, user=request.user, document_id=document_id, number=number)
    except NotFound as exc:
        raise Http404(exc.message) from exc
    response = FileResponse(
        path.open("rb"),
        content_type="application/pdf",
        as_attachment=False,
        filename=f"document-{document_id}-v{number}.pdf",
    )
    response["X-Content-Type-Options"] = "nosniff"
    patch_cache_control(response, private=True, no_cache=True)  # a member's file: no shared cache keeps it
    return response
