"""``{% tenant_switcher %}``: the tenant the page acts in and, for a user of several tenants, a
form that switches it (``portal:tenant-switch``, kept in the session)."""

from __future__ import annotations

from django import template

from core.errors import ApplicationError
from core.memberships import membership_for_request, membership_list

register = template.Library()


@register.inclusion_tag("portal/_tenant_switcher.html", takes_context=True)
def tenant_switcher(context) -> dict:
    """Context of ``portal/_tenant_switcher.html``: ``current`` (a ``Membership`` or ``None``),
    ``memberships`` (the user's the request may act in, by slug) and ``next`` (this page's path)."""
    request = context.get("request")
    if request is None or not request.user.is_authenticated:
        return {"current": None, "memberships": []}
    try:
        current = membership_for_request(request, pick_first=True)
    except ApplicationError:
        current = None
    return {
        "current": current,
        "memberships": membership_list(user=request.user, request=request),
        "next": request.get_full_path(),
        "csrf_token": context.get("csrf_token"),
    }
