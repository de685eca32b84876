"""The API's one error shape: its serializer (for the OpenAPI schema) and the single DRF exception handler."""

from __future__ import annotations

from rest_framework import exceptions as drf_exceptions
from rest_framework import serializers
from rest_framework.exceptions import ParseError
from rest_framework.pagination import LimitOffsetPagination
from rest_framework.parsers import JSONParser
from rest_framework.response import Response

from core.errors import ApplicationError


class ErrorSerializer(serializers.Serializer):
    """The one error shape of the API: ``{"error": {"code", "message"}}``."""

    class ErrorBodySerializer(serializers.Serializer):
        code = serializers.CharField()
        message = serializers.JSONField()

    error = ErrorBodySerializer()


# The error responses every endpoint documents; add 413, 415, 502 where they apply.
ERRORS = {code: ErrorSerializer for code in (400, 401, 403, 404)}


def api_exception_handler(exc, context):
    """DRF exception handler: one response shape for domain and framework errors."""
    if isinstance(exc, ApplicationError):
        return Response({"error": {"code": exc.code, "message": exc.message}}, status=exc.status)
    # Imported here: rest_framework.views reads DEFAULT_PARSER_CLASSES (this module) on import, so a
    # top-level import is circular when DRF's settings import this module first (system checks).
    from rest_framework.views import exception_handler

    response = exception_handler(exc, context)
    if response is not None and isinstance(exc, drf_exceptions.APIException):
        detail = response.data
        message = detail.get("detail") if isinstance(detail, dict) and "detail" in detail else detail
        code = exc.get_codes() if isinstance(exc.get_codes(), str) else "invalid_input"
        response.data = {"error": {"code": code, "message": message}}
    return response


class BoundedLimitOffsetPagination(LimitOffsetPagination):
    """Limit/offset pagination whose numbers stay in range: ``limit`` at most ``max_limit`` (200),
    ``offset`` at most ``MAX_OFFSET`` (a larger one reads as past the end, never as a database
    integer overflow)."""

    max_limit = 200
    MAX_OFFSET = 1_000_000_000

    def get_offset(self, request):
        return min(super().get_offset(request), self.MAX_OFFSET)


class BoundedJSONParser(JSONParser):
    """DRF's JSON parser, with a body nested too deeply for Python's parser as a 400, not a 500."""

    def parse(self, stream, media_type=None, parser_context=None):
        try:
            return super().parse(stream, media_type=media_type, parser_context=parser_context)
        except RecursionError as exc:
            raise ParseError("JSON parse error - the body is nested too deeply.") from exc
