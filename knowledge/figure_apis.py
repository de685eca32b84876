"""REST API of figures' pictures: ``GET /api/v1/documents/<id>/versions/<n>/figures/<index>.png``,
the picture of a figure a cited passage holds (``knowledge.figures``), for API clients: an API or
membership token as ``Authorization: Token <key>``, or ``Bearer <key>`` as MCP clients send it (a
signed-in session works too).

It is the picture the portal shows beside a citation (``portal.figures.figure_image``, which only a
signed-in session may fetch) under the same access rules: a document of another tenant, one the
caller may not see, a version or figure it does not have, a figure whose picture is not kept and
whose version has no kept original, or an original that cannot be rendered is a 404
(``{"error": {"code": "not_found", ...}}``). The ask API, ``manage.py ask --json`` and the MCP
``ask`` tool give each citation's figures with this URL (``figure_api_url``).

``figure_png_response`` is the one PNG response both views send: ``Content-Type: image/png``,
``X-Content-Type-Options: nosniff``, ``Cache-Control: private, max-age=3600`` and an ``ETag`` (a
client sending it back in ``If-None-Match`` gets a 304).
"""

from __future__ import annotations

import hashlib

from django.http import HttpResponse, HttpResponseNotModified
from django.urls import reverse
from django.utils.cache import patch_cache_control
from drf_spectacular.extensions import OpenApiAuthenticationExtension
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework.authentication import SessionAuthentication
from rest_framework.negotiation import BaseContentNegotiation, DefaultContentNegotiation
from rest_framework.renderers import JSONRenderer
from rest_framework.views import APIView

from core.api import ERRORS
from core.authentication import MembershipTokenAuthentication
from core.memberships import tenant_for_request
from knowledge.figures import figure_image_get

# How long a client may use a figure's picture without asking again (seconds).
MAX_AGE_S = 3600


def figure_api_url(document_id: int, number: int, index: int) -> str:
    """The API URL (an absolute path) of figure ``index``'s picture of version ``number`` of a
    document (``DocumentFigureApi``)."""
    return reverse("api:document-figure", args=[document_id, number, index])


def figure_png_response(request, png: bytes, *, document_id: int, number: int, index: int) -> HttpResponse:
    """``png`` (figure ``index`` of version ``number`` of document ``document_id``) as the
    response to ``request`` (module docstring for its headers): a 304 without a body when the
    request's ``If-None-Match`` names its ``ETag``."""
    etag = f'"{hashlib.sha256(png).hexdigest()[:32]}"'
    if etag in [tag.strip() for tag in request.headers.get("If-None-Match", "").split(",")]:
        response = HttpResponseNotModified()
    else:
        response = HttpResponse(png, content_type="image/png")
        response["Content-Disposition"] = f'inline; filename="document-{document_id}-v{number}-figure-{index}.png"'
    response["ETag"] = etag
    response["X-Content-Type-Options"] = "nosniff"
    patch_cache_control(response, private=True, max_age=MAX_AGE_S)  # a member's picture: no shared cache
    return response


class BearerTokenAuthentication(MembershipTokenAuthentication):
    """``Authorization: Bearer <key>``: the header an MCP client already sends (``mcp_server.auth``),
    so a figure URL of the MCP ``ask`` tool's answer is fetched with the same header."""

    keyword = "Bearer"


class BearerTokenScheme(OpenApiAuthenticationExtension):
    """The OpenAPI security scheme of ``BearerTokenAuthentication`` (``bearerAuth``)."""

    target_class = BearerTokenAuthentication
    name = "bearerAuth"

    def get_security_definition(self, auto_schema):
        return {"type": "http", "scheme": "bearer", "description": "A membership token, as MCP clients send it."}


class AnyAcceptNegotiation(BaseContentNegotiation):
    """A client asking for ``image/png`` gets the picture, and errors as JSON, whatever its
    ``Accept`` header names (the picture is no rendered representation DRF could negotiate)."""

    def select_parser(self, request, parsers):
        return DefaultContentNegotiation().select_parser(request, parsers)

    def select_renderer(self, request, renderers, format_suffix=None):
        return renderers[0], renderers[0].media_type


class DocumentFigureApi(APIView):
    """The picture of figure ``index`` of version ``number`` of a document: a PNG of at most 640
    pixels a side and 512 KB (module docstring for the 404s and headers)."""

    authentication_classes = [MembershipTokenAuthentication, BearerTokenAuthentication, SessionAuthentication]
    renderer_classes = [JSONRenderer]
    content_negotiation_class = AnyAcceptNegotiation

    @extend_schema(
        operation_id="documents_figure_retrieve",
        responses={
            (200, "image/png"): OpenApiResponse(
                response=OpenApiTypes.BINARY,
                description="The figure's picture (a citation's `figures[].url`).",
            ),
            304: OpenApiResponse(description="The picture named by If-None-Match is unchanged."),
            **ERRORS,
        },
    )
    def get(self, request, document_id: int, number: int, index: int):
        tenant = tenant_for_request(request)
        where = {"document_id": document_id, "number": number, "index": index}
        png = figure_image_get(tenant=tenant, user=request.user, **where)
        return figure_png_response(request, png, **where)
