"""What django-axes records of a sign-in attempt (``settings.AXES_USERNAME_CALLABLE``)."""

from __future__ import annotations

from django.conf import settings
from django.http import HttpRequest

# axes.models.AccessAttempt.username is a CharField(max_length=255).
USERNAME_MAX_CHARS = 255


def login_attempt_username(request: HttpRequest, credentials: dict | None = None) -> str | None:
    """The username a sign-in attempt is counted under, storable as it is.

    Takes what axes would use (``credentials``, else the POSTed ``username`` field) and returns it
    with NUL characters (which PostgreSQL text cannot hold) replaced by U+FFFD and cut to 255
    characters, the length axes stores; ``None`` when the attempt names no username. Without this,
    a 300-character or NUL-holding username made the sign-in page answer 500.
    """
    field = settings.AXES_USERNAME_FORM_FIELD
    if credentials:
        username = credentials.get(field)
    else:
        username = getattr(request, "data", request.POST).get(field)
    if username is None:
        return None
    return str(username).replace("\x00", "\ufffd")[:USERNAME_MAX_CHARS]
