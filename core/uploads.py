"""The upload limits, enforced while a multipart body streams in.

``UploadLimitHandler`` is the first of ``settings.FILE_UPLOAD_HANDLERS``: Django hands it every
piece of a multipart body before its own handlers keep the piece in memory or in a temporary file.

* A request whose ``Content-Length`` is over ``KB_MAX_UPLOAD_REQUEST_BYTES`` is refused before any
  byte of any file is read: parsing stops at the first file part (only the small form fields that
  come before it are read, e.g. the portal form's CSRF token, within Django's
  ``DATA_UPLOAD_MAX_MEMORY_SIZE`` like any form).
* A file is stopped as soon as its bytes pass ``KB_MAX_UPLOAD_BYTES``: the rest of the body is
  never read, the temporary file that Django's handler had started is closed (and so deleted),
  and no later file of the request is read (the files completed before it are kept).

A refusal is a ``core.errors.PayloadTooLarge`` (HTTP 413, code ``payload_too_large``). It is not
raised inside the parser: Django's CSRF middleware reads ``request.POST`` before any view runs, and
an exception there would be a 500, not a message. The handler records the refusal on the request
and stops the parse (``StopUpload``), so the request carries the fields read so far and the files
completed before the refused one; a view that takes uploads calls ``upload_refusal_raise(request)``
after reading ``request.POST``/``request.FILES`` (or DRF's ``request.data``) and before using
them: the API answers 413 in its error shape, the portal shows the message.
"""

from __future__ import annotations

from django.conf import settings
from django.core.files.uploadhandler import FileUploadHandler, StopUpload

from core.errors import PayloadTooLarge

# Where the refusal is kept on the ``HttpRequest`` (a DRF ``Request`` wraps it as ``_request``).
_REFUSAL_ATTRIBUTE = "_upload_refusal"


def size_text(size: int) -> str:
    """``size`` bytes for people: "20 MB" for whole mebibytes, else "2,000 bytes"."""
    if size >= 2**20 and size % 2**20 == 0:
        return f"{size // 2**20} MB"
    if size >= 2**20:
        return f"{size / 2**20:.1f} MB"
    return f"{size:,} bytes"


def upload_refusal(request) -> PayloadTooLarge | None:
    """The ``PayloadTooLarge`` recorded while ``request``'s body was parsed, else None.

    ``request`` is a Django ``HttpRequest`` or a DRF ``Request``; the body must have been parsed
    (``request.POST``, ``request.FILES`` or ``request.data`` read) for a refusal to be known.
    """
    return getattr(getattr(request, "_request", request), _REFUSAL_ATTRIBUTE, None)


def upload_refusal_raise(request) -> None:
    """Raise the ``PayloadTooLarge`` recorded for ``request``'s upload, if any (see ``upload_refusal``)."""
    refusal = upload_refusal(request)
    if refusal is not None:
        raise refusal


class UploadLimitHandler(FileUploadHandler):
    """Refuses a multipart request over ``KB_MAX_UPLOAD_REQUEST_BYTES`` (by its Content-Length)
    and stops a file at ``KB_MAX_UPLOAD_BYTES``; passes every piece on unchanged otherwise."""

    def handle_raw_input(self, input_data, META, content_length, boundary, encoding=None):
        limit = settings.KB_MAX_UPLOAD_REQUEST_BYTES
        if content_length > limit:
            self._refuse(
                f"The upload is {size_text(content_length)}; the limit for one upload is {size_text(limit)}. "
                "Send fewer or smaller files at a time."
            )
        return None  # Django parses the body, and this handler sees every file part

    def new_file(self, field_name, file_name, content_type, content_length, charset=None, content_type_extra=None):
        super().new_file(field_name, file_name, content_type, content_length, charset, content_type_extra)
        if self._refused():  # the request is over its limit: not one byte of a file is read
            raise StopUpload(connection_reset=True)
        limit = settings.KB_MAX_UPLOAD_BYTES
        if content_length is not None and content_length > limit:  # a part that declares its size
            self._refuse_file(limit)

    def receive_data_chunk(self, raw_data, start):
        limit = settings.KB_MAX_UPLOAD_BYTES
        if start + len(raw_data) > limit:
            self._refuse_file(limit)
        return raw_data

    def file_complete(self, file_size):
        return None  # Django's own handlers keep the file

    def _refuse_file(self, limit: int) -> None:
        self._refuse(f"{self.file_name}: the file is larger than {size_text(limit)} (the limit for one file).")

    def _refused(self) -> bool:
        return getattr(self.request, _REFUSAL_ATTRIBUTE, None) is not None

    def _refuse(self, message: str) -> None:
        """Record the refusal on the request; stop the parse once a file part has begun."""
        if not self._refused():
            setattr(self.request, _REFUSAL_ATTRIBUTE, PayloadTooLarge(message))
        if self.file_name is not None:
            raise StopUpload(connection_reset=True)
