"""The API's one error shape: its serializer (for the OpenAPI schema) and the single DRF exception handler."""

from __future__ import annotations

from rest_framework import exceptions as drf_exceptions
from rest_framework import serializers
from rest_framework.response import Response
from rest_framework.views import exception_handler

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
    response = exception_handler(exc, context)
    if response is not None and isinstance(exc, drf_exceptions.APIException):
        detail = response.data
        message = detail.get("detail") if isinstance(detail, dict) and "detail" in detail else detail
        code = exc.get_codes() if isinstance(exc.get_codes(), str) else "invalid_input"
        response.data = {"error": {"code": code, "message": message}}
    return response
