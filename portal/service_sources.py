"""The Sources page's service sources (Slack, Confluence, ...): each one's last content sync for
everyone who sees it, and for the tenant's owners and admins its last permission sync and a
"Test connection" button (``connection_test``, a POST with the CSRF token; htmx swaps the result in
next to the button, a plain form gets it as a message on the Sources page). Nothing here shows a
source's secret.
"""

from __future__ import annotations

from django.contrib import messages
from django.http import Http404, HttpResponse
from django.shortcuts import redirect, render
from django.utils.cache import patch_vary_headers
from django.utils.html import format_html
from django.views.decorators.http import require_POST

from core.errors import ApplicationError, NotFound
from core.memberships import membership_for_request
from core.models import Membership
from knowledge.models import Source, SyncRun
from knowledge.selectors import source_get, sync_run_newest_by_source
from knowledge.services.sources import source_test
from portal.decorators import tenant_required

MANAGING_ROLES = (Membership.Role.OWNER, Membership.Role.ADMIN)
_CONTENT = (SyncRun.Scope.ALL, SyncRun.Scope.CONTENT)
_PERMISSIONS = (SyncRun.Scope.ALL, SyncRun.Scope.PERMISSIONS)


def can_manage_sources(request) -> bool:
    """Whether the request's member may test and see the permission syncs of sources (owners, admins)."""
    return membership_for_request(request, pick_first=True).role in MANAGING_ROLES


def service_syncs_attach(tenant, sources: list[Source], *, permissions: bool) -> None:
    """Set ``content_sync`` on each of ``sources`` (its newest run that synced content: for a
    service source not a permission-only run; ``last_sync`` for the others) and, with
    ``permissions``, ``perm_sync`` on the service sources (their newest run that synced
    permissions, or ``None``)."""
    services = [source.pk for source in sources if source.is_service]
    content = sync_run_newest_by_source(tenant=tenant, source_ids=services, scopes=_CONTENT)
    perms = sync_run_newest_by_source(tenant=tenant, source_ids=services, scopes=_PERMISSIONS) if permissions else {}
    for source in sources:
        source.content_sync = content.get(source.pk) if source.is_service else source.last_sync
        if permissions and source.is_service:
            source.perm_sync = perms.get(source.pk)


def _forbidden(request, message: str):
    if getattr(request, "htmx", False):
        return HttpResponse(format_html('<p class="errorlist" role="alert">{}</p>', message), status=403)
    return render(request, "portal/forbidden.html", {"message": message}, status=403)


@require_POST
@tenant_required
def connection_test(request, tenant, source_id: int):
    """The "Test connection" of a service source (owners and admins; a 403 page otherwise): what its
    token can see, or why the service refused it, as the fragment ``portal/_source_test.html`` for
    htmx, else as a message on the Sources page. A source the user may not see is a 404."""
    if not can_manage_sources(request):
        return _forbidden(request, "Only the tenant's admins and owners may test a source's connection.")
    try:
        source = source_get(tenant=tenant, source_id=source_id, user=request.user)
    except NotFound as exc:
        raise Http404(exc.message) from exc
    try:
        ok, message = True, source_test(source=source)
    except ApplicationError as exc:  # refused, unreachable, or not a service
        ok, message = False, exc.message
    if getattr(request, "htmx", False):
        response = render(request, "portal/_source_test.html", {"ok": ok, "message": message, "source": source})
        patch_vary_headers(response, ["HX-Request"])
        return response
    messages.add_message(request, messages.SUCCESS if ok else messages.ERROR, f"{source.name}: {message}")
    return redirect("portal:sources")
