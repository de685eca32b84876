"""The figures of cited passages, shown beside an answer's citations: a thumbnail of each figure's
picture with its caption, linking to the viewer at the cited passage (whose pages hold the figure)
for a PDF figure, or to the document page at the cited chunk for a picture of an office file
(.docx, .pptx, .odt), which has no viewer.

* ``citations_with_figures``: an answer's citations, each with the ``figures`` its passage holds
  (``knowledge.figures.passage_figures_get``), for ``portal/_answer.html`` (through the
  ``{% citations_with_figures %}`` tag of ``portal.templatetags.citation_figures``).
* ``figure_image`` (``/documents/<id>/versions/<n>/figures/<index>.png``): the picture, a PNG of at
  most ``knowledge.figures.MAX_SIDE_PX`` a side and ``MAX_BYTES``, cropped from the kept PDF
  original, or an office file's picture kept when its version was stored.

The picture follows the document's access rules exactly as its original does (``portal.viewer``):
a document of another tenant, one the member may not see, a version it does not have or a figure
it does not have is a 404 like a missing one (an office picture too, though it has no original).
Browsers may keep it for an hour (``private``: no shared cache), and revalidate it by its ``ETag``
(``knowledge.figure_apis.figure_png_response``, which the API's picture sends too). Served from
the site itself, it is what the Content-Security-Policy's ``img-src 'self'`` allows.
"""

from __future__ import annotations

from django.http import Http404
from django.urls import reverse
from django.views.decorators.http import require_GET

from core.errors import ApplicationError, NotFound
from core.memberships import tenant_for_request
from core.replicas import replica_reads
from knowledge.figure_apis import figure_png_response
from knowledge.figures import Figure, figure_image_get, passage_figures_get
from portal.decorators import tenant_required
from portal.viewer import document_text_url, viewer_url

# The thumbnail's box in CSS pixels: this wide, at most this tall (the picture keeps its shape).
THUMBNAIL_WIDTH_PX = 160
THUMBNAIL_MAX_HEIGHT_PX = 200


def figure_url(document_id: int, number: int, index: int) -> str:
    """The URL of figure ``index``'s picture of version ``number`` of a document (``figure_image``)."""
    return reverse("portal:document-figure", args=[document_id, number, index])


def _thumbnail(citation: dict, figure: Figure) -> dict:
    """What the template shows of one figure: ``caption``, ``page`` (``None`` without one), ``url``
    (the picture), ``link`` (the viewer at the cited passage for a PDF figure, the document page at
    the cited chunk for an office picture) and the thumbnail's ``width`` and ``height`` (px)."""
    width, height = THUMBNAIL_WIDTH_PX, THUMBNAIL_WIDTH_PX * figure.height / figure.width
    if height > THUMBNAIL_MAX_HEIGHT_PX:
        width, height = width * THUMBNAIL_MAX_HEIGHT_PX / height, THUMBNAIL_MAX_HEIGHT_PX
    return {
        "caption": figure.caption,
        "page": figure.page,
        "url": figure_url(citation["document_id"], citation["version"], figure.index),
        "link": (document_text_url if figure.is_stored else viewer_url)(
            citation["document_id"], citation["version"], citation["chunk"]
        ),
        "width": max(round(width), 1),
        "height": max(round(height), 1),
    }


def citations_with_figures(request, citations: list[dict]) -> list[dict]:
    """``citations`` (an answer's, as ``portal.citations.answer_context`` shapes them), each with
    ``figures``: the thumbnails (``_thumbnail``) of the figures its passage holds, ``[]`` for
    none. Without a request or a tenant the member may act in, every citation has none."""
    if request is None or not citations or not request.user.is_authenticated:
        return [{**c, "figures": []} for c in citations]
    try:
        tenant = tenant_for_request(request, pick_first=True)
        found = passage_figures_get(tenant=tenant, user=request.user, citations=citations)
    except ApplicationError:
        found = {}
    return [{**c, "figures": [_thumbnail(c, figure) for figure in found.get(c["n"], [])]} for c in citations]


@require_GET
@tenant_required
@replica_reads
def figure_image(request, tenant, document_id: int, number: int, index: int):
    """Figure ``index``'s picture of version ``number`` of the document, a PNG (module docstring).
    404 for a document the member may not see, a version or figure it does not have, a figure
    whose picture is not kept and whose version has no kept original, or an original that cannot
    be rendered; 304 when the browser's ``If-None-Match`` names the picture it holds. The API's
    ``knowledge.figure_apis.DocumentFigureApi`` sends the same response to token clients."""
    where = {"document_id": document_id, "number": number, "index": index}
    try:
        png = figure_image_get(tenant=tenant, user=request.user, **where)
    except NotFound as exc:
        raise Http404(exc.message) from exc
    return figure_png_response(request, png, **where)
