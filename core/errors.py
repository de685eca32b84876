"""The domain's error type and its single translation to an API response.

Services raise ``ApplicationError`` subclasses with a stable ``code``; the DRF exception handler
(``core.api.api_exception_handler``) turns them into ``{"error": {"code", "message"}}`` with the class's HTTP status, and management
commands print the message and exit non-zero.
"""

from __future__ import annotations


class ApplicationError(Exception):
    """Base of every expected error. ``code`` is stable; ``message`` is for people."""

    code = "error"
    status = 400

    def __init__(self, message: str, *, code: str | None = None):
        super().__init__(message)
        self.message = message
        if code:
            self.code = code


class InvalidInput(ApplicationError):
    code = "invalid_input"
    status = 400


class UnsupportedFileType(ApplicationError):
    code = "unsupported_file_type"
    status = 415


class PayloadTooLarge(ApplicationError):
    code = "payload_too_large"
    status = 413


class NotFound(ApplicationError):
    code = "not_found"
    status = 404


class PermissionDenied(ApplicationError):
    code = "permission_denied"
    status = 403


class Conflict(ApplicationError):
    """The request does not fit the object's state now (e.g. editing a walk that is not paused)."""

    code = "conflict"
    status = 409


class UpstreamError(ApplicationError):
    """A model endpoint (embeddings or LLM) failed or answered nonsense."""

    code = "upstream_error"
    status = 502
