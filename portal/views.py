"""Server-rendered portal views: thin wrappers that parse input, call a selector or service, render.

Every view runs for a signed-in user and resolves the user's tenant first
(``portal.decorators.tenant_required``); a user without a membership gets a 403 page. Questions are
asked through ``people.asking``, as every other caller asks. Document text is only ever escaped
(Django autoescape, or ``escape``/``format_html`` per segment when citations are linked:
``portal.citations``). Forms are in ``portal.forms``, uploads in ``portal.uploads``.

HTMX (django-htmx's ``request.htmx``, ``docs/people.md``): a request made by htmx (``HX-Request``)
gets the fragment it swaps in (feedback form, profile form, conversation turns, version diff:
``portal.responses.partial_or_page``); any other request gets the full page, so every form and
link also works without JavaScript. Responses that differ by ``HX-Request`` say so in ``Vary``.
"""

from __future__ import annotations

import re

from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpResponse, JsonResponse, StreamingHttpResponse
from django.shortcuts import redirect, render
from django.template.loader import render_to_string
from django.urls import reverse
from django.utils.cache import patch_vary_headers
from django.utils.html import format_html
from django.utils.http import url_has_allowed_host_and_scheme
from django.utils.safestring import mark_safe
from django.views.decorators.http import require_GET, require_http_methods, require_POST
from django_htmx.http import HttpResponseClientRedirect

from core.errors import ApplicationError, NotFound, PermissionDenied
from core.memberships import membership_choose, membership_for_request
from core.replicas import replica_reads
from knowledge.models import SyncRun
from knowledge.originals import original_path
from knowledge.quotas import USAGE_ROLES, QuotaUsage, quota_usage
from knowledge.selectors import (
    chunk_list_for_version,
    document_get,
    source_overview,
    source_overview_with_last_sync,
    upload_source_list,
)
from knowledge.versions import version_diff
from people import asking
from people.conversations import conversation_delete
from people.feedback import feedback_give
from people.history import citation_open as history_citation_open
from people.selectors import conversation_get, conversation_list
from people.services import profile_get, profile_update
from portal.citations import answer_context
from portal.decorators import tenant_required
from portal.forms import AskForm, FeedbackForm, ProfileForm, UploadForm
from portal.responses import partial_or_page
from portal.service_sources import can_manage_sources, service_syncs_attach
from portal.uploads import files_upload, job_ids_parse, jobs_context, jobs_url
from portal.viewer import cited_url
from retrieval.filters import retrieval_filter
from retrieval.request import AnswerRequest
from retrieval.streaming import CONTENT_TYPE, HEADERS
from retrieval.walks.graph import document_graph, graph_svg

_VERSION_NUMBER = re.compile(r"[1-9][0-9]{0,8}")
# Pages of one tenant's objects: after a tenant switch, land on the ask page instead.
_TENANT_PAGE = re.compile(r"/(documents/|conversations/\d|\?conversation)")


@require_POST
@login_required
def tenant_switch(request):
    """Switch the tenant the portal acts in (form field ``tenant``, a slug), then go back to
    ``next`` (a path on this site; the ask page otherwise). A tenant the user is not a member of
    is a 403 page and changes nothing."""
    try:
        membership_choose(request, slug=request.POST.get("tenant", ""))
    except PermissionDenied as exc:
        return render(request, "portal/forbidden.html", {"message": exc.message}, status=403)
    target = request.POST.get("next", "")
    safe = url_has_allowed_host_and_scheme(
        target, allowed_hosts={request.get_host()}, require_https=request.is_secure()
    )
    # A conversation, document or answer belongs to the tenant just left: land on a neutral page.
    if not safe or not target.startswith("/") or _TENANT_PAGE.match(target):
        target = reverse("portal:ask")
    if getattr(request, "htmx", False):  # the whole page depends on the tenant: load it anew
        return HttpResponseClientRedirect(target)
    return redirect(target)


@require_http_methods(["GET", "POST"])
@tenant_required
def ask(request, tenant):
    """The ask page. A question continues the conversation named by the form's hidden
    ``conversation`` (``?conversation=<id>`` opens one of the user's conversations), else starts one."""
    if request.method == "POST":
        form = AskForm(request.POST)
    else:
        form = AskForm(initial={"conversation": _id_param(request.GET.get("conversation", ""))})
    context = {"form": form, "tenant": tenant}
    if form.is_valid():
        try:
            answer = asking.ask(_ask_request(form), tenant=tenant, user=request.user).as_dict()
        except NotFound:
            form.add_error(None, "That conversation is not yours or no longer exists; start a new one.")
        except ApplicationError as exc:
            form.add_error("question", exc.message)
        else:
            context.update(
                answer_context(
                    answer,
                    thread=thread_context(tenant, request.user, answer),
                    can_participate=membership_for_request(request, pick_first=True).can_participate,
                )
            )
            form = AskForm(
                initial={
                    "conversation": answer.get("conversation_id"),
                    "as_of": form.cleaned_data["as_of"],
                    "personalize": form.cleaned_data["personalize"],
                }
            )
            context["form"] = form
    elif request.method == "GET" and form.initial.get("conversation"):
        try:
            conversation = conversation_get(
                tenant=tenant, user=request.user, conversation_id=form.initial["conversation"]
            )
        except NotFound as exc:
            raise Http404(exc.message) from exc
        context["thread"] = {"conversation": conversation, "turns": list(conversation.turns.all())}
    return render(request, "portal/ask.html", context)


def _ask_request(form: AskForm) -> AnswerRequest:
    """The ``AnswerRequest`` of a valid ``AskForm``."""
    return AnswerRequest(
        question=form.cleaned_data["question"],
        pipeline=form.cleaned_data["pipeline"] or None,
        conversation_id=form.cleaned_data["conversation"],
        as_of=form.cleaned_data["as_of"],
        personalize=form.cleaned_data["personalize"],
    )


def _id_param(value: str) -> int | None:
    return int(value) if _VERSION_NUMBER.fullmatch(value) else None


def thread_context(tenant, user, answer: dict) -> dict | None:
    """The conversation ``answer`` belongs to and its turns before this one, for ``portal/_thread.html``."""
    if not answer.get("conversation_id"):
        return None
    conversation = conversation_get(tenant=tenant, user=user, conversation_id=answer["conversation_id"])
    turns = [turn for turn in conversation.turns.all() if turn.order < answer["turn"]]
    return {"conversation": conversation, "turns": turns}


@require_GET
@tenant_required
@replica_reads
def conversations(request, tenant):
    """The user's conversations, most recent first (the first 100); each unfolds its questions in
    place (htmx loads ``conversation_detail``'s fragment) and continues on the ask page."""
    return render(
        request,
        "portal/conversations.html",
        {"conversations": list(conversation_list(tenant=tenant, user=request.user)[:100])},
    )


@require_GET
@tenant_required
@replica_reads
def conversation_detail(request, tenant, conversation_id: int):
    """One of the user's conversations: its questions and answers (the fragment
    ``portal/_conversation_turns.html`` for htmx, a page otherwise). 404 if it is not theirs."""
    try:
        conversation = conversation_get(tenant=tenant, user=request.user, conversation_id=conversation_id)
    except NotFound as exc:
        raise Http404(exc.message) from exc
    context = {"conversation": conversation, "turns": list(conversation.turns.all())}
    return partial_or_page(
        request, fragment="portal/_conversation_turns.html", page="portal/conversation.html", context=context
    )


@require_POST
@tenant_required
def conversation_remove(request, tenant, conversation_id: int):
    """Delete one of the user's conversations (``people.conversations.conversation_delete``):
    an empty fragment for htmx (its list item is swapped out), else back to the list. 404 if it
    is not theirs."""
    try:
        conversation_delete(tenant=tenant, user=request.user, conversation_id=conversation_id)
    except NotFound as exc:
        raise Http404(exc.message) from exc
    if getattr(request, "htmx", False):
        return HttpResponse("")
    return redirect("portal:conversations")


@require_POST
@tenant_required
def ask_stream(request, tenant):
    """The ask form's answer as Server-Sent Events (``people.asking.ask_stream``), for
    the page's script: ``step`` and ``token`` events as the run goes, then ``answer`` carrying
    ``html``, the answer rendered by ``portal/_answer.html`` exactly as the page renders it.

    Session sign-in and CSRF token required (a POST). An invalid form is a JSON 400
    ``{"error": {"code": "invalid_input", "message": {field: [messages]}}}`` before streaming.
    """
    form = AskForm(request.POST)
    if not form.is_valid():
        errors = {field: [str(m) for m in messages] for field, messages in form.errors.items()}
        return JsonResponse({"error": {"code": "invalid_input", "message": errors}}, status=400)

    def present(answer: dict) -> dict:
        context = answer_context(
            answer,
            thread=thread_context(tenant, request.user, answer),
            can_participate=membership_for_request(request, pick_first=True).can_participate,
        )
        html = render_to_string("portal/_answer.html", context, request=request)
        return {**answer, "html": html}

    events = asking.ask_stream(_ask_request(form), tenant=tenant, user=request.user, present=present)
    return StreamingHttpResponse(events, content_type=CONTENT_TYPE, headers=HEADERS)


@require_GET
@tenant_required
def citation_open(request, tenant, trace_id: int, n: int):
    """A citation link of an answer: record that the user opened it (``people.history.citation_open``,
    read by personalization) and redirect to the cited page of the original PDF when it is kept
    (``portal.viewer``), else to the cited chunk of the document page. 404 for an answer that is
    not the user's or a citation it does not have."""
    try:
        opened = history_citation_open(tenant=tenant, user=request.user, trace_id=trace_id, citation=n)
    except NotFound as exc:
        raise Http404(exc.message) from exc
    return redirect(
        cited_url(tenant_id=tenant.pk, document_id=opened.document_id, number=opened.version, ordinal=opened.chunk)
    )


@require_POST
@tenant_required
def feedback(request, tenant):
    """Thumbs up or down (and a comment) on an answer or one citation (``people.feedback``).

    The answer's forms post here with htmx and get their own form back
    (``portal/_feedback_form.html``: the rating pressed and a status line, or the error with
    status 400/404); a plain form post gets a thank-you (or error) page.
    """
    form = FeedbackForm(request.POST)
    state = {
        "trace_id": form.data.get("trace", ""),
        "n": form.data.get("citation") or None,
        "comment": form.data.get("comment", ""),
    }
    if not form.is_valid():
        message = "; ".join(f"{field}: {' '.join(errors)}" for field, errors in form.errors.items())
        return _feedback_reply(request, state, message, status=400)
    data = form.cleaned_data
    try:
        feedback_give(
            tenant=tenant,
            user=request.user,
            trace_id=data["trace"],
            rating=data["rating"],
            citation=data["citation"],
            comment=data["comment"],
        )
    except NotFound:
        return _feedback_reply(request, state, "That answer is no longer on record.", status=404)
    except ApplicationError as exc:
        return _feedback_reply(request, state, exc.message, status=400)
    state["rating"] = data["rating"]
    return _feedback_reply(request, state, "Thanks for your feedback.", status=200)


def _feedback_reply(request, state: dict, message: str, *, status: int):
    context = {**state, "message": message, "error": status != 200}
    return partial_or_page(
        request, fragment="portal/_feedback_form.html", page="portal/feedback.html", context=context, status=status
    )


@require_http_methods(["GET", "POST"])
@tenant_required
def profile(request, tenant):
    """The user's profile in this tenant: what personalized answers know about them."""
    current = profile_get(user=request.user, tenant=tenant)
    names = list(source_overview(tenant=tenant, user=request.user).values_list("name", flat=True))
    saved = False
    if request.method == "POST":
        form = ProfileForm(request.POST, source_names=names)
        if form.is_valid():
            try:
                current = profile_update(user=request.user, tenant=tenant, **form.cleaned_data)
            except ApplicationError as exc:
                form.add_error(None, exc.message)
            else:
                saved = True
    else:
        form = ProfileForm(
            source_names=names,
            initial={
                "title": current.title,
                "team": current.team,
                "expertise": current.expertise,
                "language": current.language,
                "preferred_sources": list(current.preferred_sources.values_list("name", flat=True)),
                "muted_sources": list(current.muted_sources.values_list("name", flat=True)),
                "about": current.about,
            },
        )
    return partial_or_page(
        request,
        fragment="portal/_profile_form.html",
        page="portal/profile.html",
        context={"form": form, "saved": saved, "tenant": tenant},
    )


@require_http_methods(["GET", "POST"])
@tenant_required
def sources(request, tenant):
    """The tenant's sources: their kind, document and chunk counts, how fresh they are and, for
    the synced ones, their last sync. Editors and above also get the upload form; a POST uploads
    its files (``knowledge.services.upload_batches``, one job per file) and redirects to
    ``?jobs=<ids>``, which lists those jobs (``upload_jobs`` refreshes the list while they run).
    A file refused is reported by name with the reason (the others still upload), except a file over
    the size limit, which stops the whole submission while it streams in (nothing of it is stored);
    a POST from a lesser role is a 403 page. Owners and admins also see the tenant's usage against its quotas."""
    can_upload = membership_for_request(request, pick_first=True).can_edit
    if request.method == "POST" and not can_upload:
        message = "Only editors, admins and owners may upload documents."
        return render(request, "portal/forbidden.html", {"message": message}, status=403)
    upload_form = None
    if can_upload:
        names = list(upload_source_list(tenant=tenant, user=request.user).values_list("name", flat=True))
        upload_form = UploadForm(request.POST if request.method == "POST" else None, source_names=names)
    if request.method == "POST":
        job_ids = files_upload(request, tenant, upload_form)
        if job_ids:
            return redirect(jobs_url("portal:sources", job_ids))
    context = {
        "tenant": tenant,
        **sources_table_context(request, tenant),
        "upload_form": upload_form,
        "usage": _usage_rows(request, tenant),
        **jobs_context(tenant, request.user, job_ids_parse(request.GET.get("jobs", ""))),
    }
    return render(request, "portal/sources.html", context, status=400 if request.method == "POST" else 200)


def sources_table_context(request, tenant) -> dict:
    """What ``portal/_sources_table.html`` renders: the sources the user may see with their last
    sync and last content sync (``sources``); ``sources_syncing``: whether one has a run pending or
    running (the table then polls ``sources_table`` every 2 seconds); ``service_columns``: whether
    the table also shows the service sources' last permission sync and "Test connection" (owners
    and admins, when there is a service source: ``portal.service_sources``)."""
    rows = source_overview_with_last_sync(tenant=tenant, user=request.user)
    manage = can_manage_sources(request)
    service_syncs_attach(tenant, rows, permissions=manage)
    active = (SyncRun.Status.PENDING, SyncRun.Status.RUNNING)
    return {
        "sources": rows,
        "sources_syncing": any(s.last_sync and s.last_sync.status in active for s in rows),
        "service_columns": manage and any(s.is_service for s in rows),
    }


@require_GET
@tenant_required
def sources_table(request, tenant):
    """The sources table alone (the fragment ``portal/_sources_table.html``), which htmx polls
    every 2 seconds while a source syncs: its documents done of total, chunks per second and time
    left move without a reload, and the counts are fresh once it ends (the polling stops then).
    A request not made by htmx goes to the Sources page."""
    if not getattr(request, "htmx", False):
        return redirect("portal:sources")
    response = render(request, "portal/_sources_table.html", sources_table_context(request, tenant))
    patch_vary_headers(response, ["HX-Request"])
    return response


def _usage_rows(request, tenant) -> list[QuotaUsage] | None:
    """The tenant's usage against each quota (``knowledge.quotas``) for its owners and admins (the
    table ``portal/_usage.html``); ``None`` for other roles."""
    if membership_for_request(request, pick_first=True).role not in USAGE_ROLES:
        return None
    return list(quota_usage(tenant=tenant).values())


@require_GET
@tenant_required
def upload_jobs(request, tenant):
    """The job list of ``?jobs=<ids>`` (the fragment ``portal/_upload_jobs.html``, which polls
    here every 2 seconds with htmx while a job is waiting or running, and once all are finished
    offers to reload the page for the new counts); a request not made by htmx goes to the Sources
    page showing the same jobs. The tenant's jobs only: none found is a 404."""
    context = jobs_context(tenant, request.user, job_ids_parse(request.GET.get("jobs", "")))
    if not context["jobs"]:
        return HttpResponse(format_html('<p class="errorlist" role="alert">{}</p>', "No such upload jobs."), status=404)
    if not getattr(request, "htmx", False):
        return redirect(context["jobs_page_url"])
    response = render(request, "portal/_upload_jobs.html", {**context, "polled": True})
    patch_vary_headers(response, ["HX-Request"])
    return response


@require_GET
@tenant_required
@replica_reads  # a reading page: from a healthy replica when there are some (core.replicas)
def document_detail(request, tenant, document_id: int):
    """A document's version (``?version=<n>``, the current one by default) chunk by chunk, its
    versions, and with ``?diff=<m>`` a word diff between the two (the fragment
    ``portal/_diff.html`` for htmx)."""
    try:
        document = document_get(tenant=tenant, document_id=document_id, user=request.user)
    except NotFound as exc:
        raise Http404(exc.message) from exc
    versions = list(document.versions.all())  # newest first, with chunk_count
    version = _chosen_version(versions, request.GET.get("version", ""))
    if version is None:
        raise Http404("No such version.")
    chunks = chunk_list_for_version(tenant=tenant, version_id=version.pk)
    diff = None
    if request.GET.get("diff"):  # a word diff between this version and version ?diff=<number>
        other = _chosen_version(versions, request.GET["diff"])
        if other is None or other.pk == version.pk:
            raise Http404("No such version to compare with.")
        old, new = sorted((other.number, version.number))
        diff = version_diff(tenant=tenant, document_id=document.pk, old=old, new=new)
    context = {"document": document, "versions": versions, "version": version, "chunks": list(chunks), "diff": diff}
    # A chunk's page links to the viewer when the version's original PDF is kept (portal.viewer).
    kept = original_path(tenant_id=tenant.pk, document_id=document.pk, number=version.number)
    context["original_kept"] = kept.is_file()
    if diff is None:
        context["walk_graph"] = _walk_graph(tenant, request.user, document.pk)
    if diff is not None:  # htmx asks for the diff only (the version links' hx-get)
        return partial_or_page(request, fragment="portal/_diff.html", page="portal/document.html", context=context)
    return render(request, "portal/document.html", context)


def _walk_graph(tenant, user, document_id: int) -> dict:
    """The query-time graph walks built in the document, as the user may see it: ``{"svg", "facts"}``
    (``retrieval.walks.graph``; an empty ``svg`` when no walk kept a fact here)."""
    where = retrieval_filter(tenant=tenant, user=user)
    graph = document_graph(where=where, document_id=document_id, user=user)
    facts = sum(1 for node in graph.nodes.values() if node["kind"] == "fact")
    return {"svg": mark_safe(graph_svg(graph)), "facts": facts}  # noqa: S308  (graph_svg escapes every label)


def _chosen_version(versions: list, number: str):
    """The version numbered ``number``, or the current one when ``number`` is empty."""
    if not number:
        return next((v for v in versions if v.is_current), versions[0] if versions else None)
    if not _VERSION_NUMBER.fullmatch(number):  # 1-9 ASCII digits: not "²", not 5,000 nines
        return None
    return next((v for v in versions if v.number == int(number)), None)
