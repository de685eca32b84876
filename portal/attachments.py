"""The ask page's conversation files: attach a file to the open conversation (or to a new one),
see them listed under it, remove one (``people.attachments``).

A conversation's files are listed with an attach form by ``portal/_conversation_files.html``
(inside the thread of the ask page). Its forms post here with htmx and get that fragment back,
with a status line, or the error and its status (400, 403, 413, 415); a plain form post is
redirected to the conversation on the ask page, or shown the page with the error. A file
attached to a new conversation opens that conversation on the ask page.
"""

from __future__ import annotations

from django.conf import settings
from django.http import Http404
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils.cache import patch_vary_headers
from django.views.decorators.http import require_POST
from django_htmx.http import HttpResponseClientRedirect

from core.errors import ApplicationError, InvalidInput, NotFound
from core.uploads import upload_refusal
from people.attachments import conversation_file_attach, conversation_file_list, conversation_file_remove
from people.selectors import conversation_get
from portal.decorators import tenant_required
from portal.forms import AskForm


def _conversation_url(conversation_id: int) -> str:
    return f"{reverse('portal:ask')}?conversation={conversation_id}"


def _attach(request, tenant, conversation_id: int | None):
    """Attach the request's ``file`` (the service's errors pass through)."""
    refusal = upload_refusal(request)  # over the upload limit: stopped while it streamed in
    if refusal is not None:
        raise refusal
    upload = request.FILES.get("file")
    if upload is None:
        raise InvalidInput("Choose a file to attach.", code="file_required")
    return conversation_file_attach(
        tenant=tenant,
        user=request.user,
        file_name=upload.name,
        data=upload.read(settings.KB_MAX_UPLOAD_BYTES + 1),  # one byte past the limit: refused as too large
        conversation_id=conversation_id,
    )


def _files_reply(request, tenant, conversation_id: int, *, message: str = "", status: int = 200):
    """The fragment of the conversation's files for htmx; a redirect to the conversation (or, after an
    error, the ask page with the conversation and the error) otherwise."""
    try:
        conversation = conversation_get(tenant=tenant, user=request.user, conversation_id=conversation_id)
    except NotFound as exc:
        raise Http404(exc.message) from exc
    if not getattr(request, "htmx", False) and status == 200:
        return redirect(_conversation_url(conversation_id))
    context = {
        "conversation": conversation,
        "files": list(conversation_file_list(tenant=tenant, user=request.user, conversation_id=conversation_id)),
        "files_message": message,
        "files_error": status != 200,
    }
    if getattr(request, "htmx", False):
        response = render(request, "portal/_conversation_files.html", context, status=status)
        patch_vary_headers(response, ["HX-Request"])
        return response
    thread = {"conversation": conversation, "turns": list(conversation.turns.all())}
    form = AskForm(initial={"conversation": conversation_id})
    return render(
        request, "portal/ask.html", {**context, "form": form, "tenant": tenant, "thread": thread}, status=status
    )


@require_POST
@tenant_required
def conversation_file_add(request, tenant, conversation_id: int):
    """Attach the posted ``file`` to the user's conversation ``conversation_id``. 404 if it is not theirs."""
    try:
        attached = _attach(request, tenant, conversation_id)
    except NotFound as exc:
        raise Http404(exc.message) from exc
    except ApplicationError as exc:
        return _files_reply(request, tenant, conversation_id, message=exc.message, status=exc.status)
    return _files_reply(request, tenant, conversation_id, message=f"Attached {attached.name}.")


@require_POST
@tenant_required
def conversation_file_start(request, tenant):
    """Attach the posted ``file`` to a new conversation of the user, then open it on the ask page
    (htmx: a client redirect). An error shows the ask page (htmx: the new-file form) with it."""
    try:
        attached = _attach(request, tenant, None)
    except ApplicationError as exc:
        context = {"files_message": exc.message, "files_error": True}
        if getattr(request, "htmx", False):
            response = render(request, "portal/_conversation_file_start.html", context, status=exc.status)
            patch_vary_headers(response, ["HX-Request"])
            return response
        return render(request, "portal/ask.html", {**context, "form": AskForm(), "tenant": tenant}, status=exc.status)
    url = _conversation_url(attached.conversation_id)
    return HttpResponseClientRedirect(url) if getattr(request, "htmx", False) else redirect(url)


@require_POST
@tenant_required
def conversation_file_delete(request, tenant, conversation_id: int, file_id: int):
    """Remove file ``file_id`` from the user's conversation ``conversation_id`` (its document is
    deleted). 404 if either is not theirs."""
    try:
        conversation_file_remove(tenant=tenant, user=request.user, conversation_id=conversation_id, file_id=file_id)
    except NotFound as exc:
        raise Http404(exc.message) from exc
    return _files_reply(request, tenant, conversation_id, message="The file was removed.")
