"""The portal views' decorator: a signed-in member of a tenant, or a sign-in redirect or 403."""

from __future__ import annotations

from functools import wraps
from urllib.parse import quote

from django.contrib.auth.decorators import login_required
from django.http import HttpResponse
from django.shortcuts import render
from django.urls import reverse
from django.utils.html import format_html
from django_htmx.http import HttpResponseClientRedirect

from core.errors import PermissionDenied
from core.memberships import tenant_for_request


def tenant_required(view):
    """Sign-in required; the view receives the tenant chosen in the session (the user's first by
    slug until they switch: ``core.memberships``) after ``request``, or a 403 page.

    An htmx request of a signed-out user (session expired) is sent to the sign-in page as a whole
    page (``HX-Redirect``), not swapped into a fragment; a 403 for htmx is a one-line alert.
    """

    @wraps(view)
    def wrapper(request, *args, **kwargs):
        try:
            tenant = tenant_for_request(request, pick_first=True)
        except PermissionDenied as exc:
            if getattr(request, "htmx", False):
                return HttpResponse(format_html('<p class="errorlist" role="alert">{}</p>', exc.message), status=403)
            return render(request, "portal/forbidden.html", {"message": exc.message}, status=403)
        return view(request, tenant, *args, **kwargs)

    signed_in = login_required(wrapper)

    @wraps(view)
    def guard(request, *args, **kwargs):
        if getattr(request, "htmx", False) and not request.user.is_authenticated:
            back = request.htmx.current_url_abs_path or reverse("portal:ask")
            return HttpResponseClientRedirect(f"{reverse('portal:login')}?next={quote(back)}")
        return signed_in(request, *args, **kwargs)

    return guard
