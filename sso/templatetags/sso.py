"""``{% sso_buttons %}``: the "Sign in with <provider>" buttons of the login pages.

The installation's provider always shows when it is configured; a tenant's own provider shows
when the login page is opened for that tenant (``/login/?tenant=<slug>``,
``/admin/login/?tenant=<slug>``), so the page never lists the tenants of the installation.
"""

from __future__ import annotations

from urllib.parse import urlencode

from django import template
from django.urls import reverse

from sso.providers import installation_provider, tenant_provider

register = template.Library()


@register.inclusion_tag("sso/buttons.html", takes_context=True)
def sso_buttons(context, default_next: str = ""):
    """``providers``: ``[{"name", "url"}]``, each URL starting the sign-in and carrying ``next``
    (the page's ``next``, else ``default_next``)."""
    request = context.get("request")
    if request is None:
        return {"providers": []}
    next_url = context.get("next") or request.GET.get("next") or default_next
    query = f"?{urlencode({'next': next_url})}" if next_url else ""
    providers = []
    installation = installation_provider()
    if installation is not None:
        providers.append({"name": installation.name, "url": reverse("sso:login") + query})
    slug = request.GET.get("tenant") or ""
    own = tenant_provider(slug=slug) if slug else None
    if own is not None:
        providers.append({"name": own.name, "url": reverse("sso:tenant-login", kwargs={"slug": slug}) + query})
    return {"providers": providers}
