"""Server-rendered portal views: thin wrappers that parse input, call a selector or service, render.

Every view runs for a signed-in user and resolves the user's tenant first; a user without a
membership gets a 403 page. Document text is only ever escaped (Django autoescape, or
``escape``/``format_html`` per segment when citations are linked).

HTMX (django-htmx's ``request.htmx``, ``docs/people.md``): a request made by htmx (``HX-Request``)
gets the fragment it swaps in (feedback form, profile form, conversation turns, version diff); any
other request gets the full page, so every form and link also works without JavaScript. Responses
that differ by ``HX-Request`` say so in ``Vary``.
"""

from __future__ import annotations

import re
from functools import wraps
from urllib.parse import quote

from django import forms
from django.conf import global_settings
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpResponse, JsonResponse, StreamingHttpResponse
from django.shortcuts import redirect, render
from django.template.loader import render_to_string
from django.urls import reverse
from django.utils.cache import patch_vary_headers
from django.utils.html import escape, format_html
from django.utils.http import url_has_allowed_host_and_scheme
from django.utils.safestring import SafeString
from django.views.decorators.http import require_GET, require_http_methods, require_POST
from django_htmx.http import HttpResponseClientRedirect

from core.errors import ApplicationError, NotFound, PermissionDenied
from core.memberships import membership_choose, membership_for_request, tenant_for_request
from core.uploads import upload_refusal
from knowledge.models import IngestionJob
from knowledge.selectors import (
    chunk_list_for_version,
    document_get,
    ingestion_job_list,
    source_overview,
    source_overview_with_last_sync,
    upload_source_list,
)
from knowledge.services.upload_batches import upload_batch_ingest
from knowledge.versions import version_diff
from people.conversations import conversation_ask, conversation_delete
from people.feedback import MAX_COMMENT_CHARS, feedback_give
from people.history import citation_open as history_citation_open
from people.models import Profile
from people.selectors import conversation_get, conversation_list
from people.services import profile_get, profile_update
from retrieval.pipeline import PIPELINE_NAMES
from retrieval.quotas import USAGE_ROLES, QuotaUsage, quota_usage
from retrieval.stages.generate.citations import sentence_spans
from retrieval.streaming import CONTENT_TYPE, HEADERS, answer_events

# Same pattern as the one the generate stage writes citations with: "[n]".
_CITATION = re.compile(r"\[(\d{1,3})\]")
_VERSION_NUMBER = re.compile(r"[1-9][0-9]{0,8}")
# Pages of one tenant's objects: after a tenant switch, land on the ask page instead.
_TENANT_PAGE = re.compile(r"/(documents/|conversations/\d|\?conversation)")
# ``?jobs=1,2``: the ingestion jobs of one upload (at most this many ids are read).
_JOB_IDS = re.compile(r"[1-9][0-9]{0,17}")
_MAX_JOBS_SHOWN = 50


class AskForm(forms.Form):
    question = forms.CharField(
        max_length=2000,
        widget=forms.Textarea(attrs={"rows": 3, "autofocus": True, "placeholder": "Ask a question…"}),
    )
    pipeline = forms.ChoiceField(
        choices=[("", "default")] + [(name, name) for name in PIPELINE_NAMES],
        required=False,
        help_text="How to search: the tenant's default, or a named pipeline.",
    )
    conversation = forms.IntegerField(min_value=1, max_value=2**63 - 1, required=False, widget=forms.HiddenInput)
    as_of = forms.DateField(
        required=False,
        input_formats=["%Y-%m-%d"],
        widget=forms.DateInput(attrs={"type": "date"}, format="%Y-%m-%d"),
        label="As of",
        help_text="Answer from the document versions current on that day (empty: current versions).",
    )
    personalize = forms.BooleanField(
        required=False,
        initial=True,
        label="Personalize",
        help_text="Rank what your profile prefers and you found useful higher, and shape the answer for you.",
    )


class FeedbackForm(forms.Form):
    trace = forms.IntegerField(min_value=1, max_value=2**63 - 1, widget=forms.HiddenInput)
    citation = forms.IntegerField(min_value=1, max_value=1000, required=False, widget=forms.HiddenInput)
    rating = forms.ChoiceField(choices=(("up", "Helpful"), ("down", "Not helpful")))
    comment = forms.CharField(max_length=MAX_COMMENT_CHARS, required=False)


class ProfileForm(forms.Form):
    title = forms.CharField(label="Role or title", max_length=200, required=False)
    team = forms.CharField(max_length=200, required=False)
    expertise = forms.ChoiceField(choices=[("", "not said"), *Profile.Expertise.choices], required=False)
    language = forms.ChoiceField(
        label="Preferred language", choices=[("", "not said"), *global_settings.LANGUAGES], required=False
    )
    preferred_sources = forms.MultipleChoiceField(widget=forms.CheckboxSelectMultiple, required=False)
    muted_sources = forms.MultipleChoiceField(widget=forms.CheckboxSelectMultiple, required=False)
    about = forms.CharField(label="About me", max_length=2000, required=False, widget=forms.Textarea(attrs={"rows": 4}))

    def __init__(self, *args, source_names=(), **kwargs):
        super().__init__(*args, **kwargs)
        for name in ("preferred_sources", "muted_sources"):
            self.fields[name].choices = [(n, n) for n in source_names]


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


def partial_or_page(request, *, fragment: str, page: str, context: dict, status: int = 200):
    """``fragment`` for an htmx request (not a history restore), else the full ``page``; the
    response varies on ``HX-Request`` (a cache must not hand the fragment to a page load)."""
    htmx = getattr(request, "htmx", None)
    partial = bool(htmx) and not htmx.history_restore_request
    response = render(request, fragment if partial else page, context, status=status)
    patch_vary_headers(response, ["HX-Request"])
    return response


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


def citation_url(citation: dict, *, trace_id: int | None = None) -> str:
    """The document page of the cited version, scrolled to the cited chunk; through
    ``citation_open`` (which records the opening for personalization) when the answer has a trace."""
    if trace_id:
        return reverse("portal:citation-open", args=[trace_id, citation["n"]])
    path = reverse("portal:document", args=[citation["document_id"]])
    return f"{path}?version={citation['version']}#chunk-{citation['chunk']}"


def answer_with_links(text: str, urls: dict[int, str]) -> SafeString:
    """``text`` escaped, with each ``[n]`` that has a URL turned into a link to it."""
    html = SafeString("")
    last = 0
    for match in _CITATION.finditer(text):
        html += escape(text[last : match.start()])
        n = int(match.group(1))
        if n in urls:
            html += format_html('<a class="cite" href="{}">[{}]</a>', urls[n], n)
        else:
            html += escape(match.group(0))
        last = match.end()
    return html + escape(text[last:])


def explanation_html(answer: dict, urls: dict[int, str]) -> SafeString:
    """The answer's explanation as ``answer_with_links`` renders it, each sentence that no passage
    supports (``answer["sentences"]``, ``supported`` false) in ``<mark class="unsupported">`` with
    a visible "unsupported" tag after it. The sentences are found again in the text with the
    splitting that made them (``sentence_spans``); when they do not line up (an answer kept
    before sentences were recorded) the text is rendered unmarked."""
    text = answer["answer"]
    sentences = answer.get("sentences") or []
    if all(sentence.get("supported", True) for sentence in sentences):
        return answer_with_links(text, urls)
    spans = sentence_spans(text)
    if [span.text for span in spans] != [sentence.get("text") for sentence in sentences]:
        return answer_with_links(text, urls)
    html = SafeString("")
    last = 0
    for span, sentence in zip(spans, sentences, strict=True):
        if sentence.get("supported", True):
            continue
        html += answer_with_links(text[last : span.start], urls)
        html += format_html(
            '<mark class="unsupported" title="No passage supports this sentence">{}</mark>'
            '<span class="unsupported-tag">unsupported</span>',
            answer_with_links(text[span.start : span.end], urls),
        )
        last = span.end
    return html + answer_with_links(text[last:], urls)


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
            answer = conversation_ask(
                tenant=tenant,
                user=request.user,
                question=form.cleaned_data["question"],
                pipeline=form.cleaned_data["pipeline"] or None,
                conversation_id=form.cleaned_data["conversation"],
                as_of=form.cleaned_data["as_of"],
                options={"personalize": form.cleaned_data["personalize"]},
            ).as_dict()
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


def answer_context(answer: dict, *, thread: dict | None = None, can_participate: bool = True) -> dict:
    """What ``portal/_answer.html`` renders: ``answer`` (``AnswerRun.as_dict()``: its short answer
    shows first), its explanation as escaped HTML with linked ``[n]`` and unsupported sentences
    marked (``answer_html``: ``explanation_html``), its ``citations`` with their ``url`` and
    the conversation's earlier turns (``thread``, from ``thread_context``); feedback forms show
    when ``can_participate`` (not for viewers)."""
    citations = [{**c, "url": citation_url(c, trace_id=answer.get("trace_id"))} for c in answer["citations"]]
    return {
        "thread": thread,
        "can_participate": can_participate,
        "answer": answer,
        "answer_html": explanation_html(answer, {c["n"]: c["url"] for c in citations}),
        "citations": citations,
    }


@require_POST
@tenant_required
def ask_stream(request, tenant):
    """The ask form's answer as Server-Sent Events (``retrieval.streaming.answer_events``), for
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

    events = answer_events(
        tenant=tenant,
        user=request.user,
        present=present,
        runner=conversation_ask,
        question=form.cleaned_data["question"],
        pipeline=form.cleaned_data["pipeline"] or None,
        conversation_id=form.cleaned_data["conversation"],
        as_of=form.cleaned_data["as_of"],
        options={"personalize": form.cleaned_data["personalize"]},
    )
    return StreamingHttpResponse(events, content_type=CONTENT_TYPE, headers=HEADERS)


@require_GET
@tenant_required
def citation_open(request, tenant, trace_id: int, n: int):
    """A citation link of an answer: record that the user opened it (``people.history.citation_open``,
    read by personalization) and redirect to the cited chunk of the document page. 404 for an
    answer that is not the user's or a citation it does not have."""
    try:
        opened = history_citation_open(tenant=tenant, user=request.user, trace_id=trace_id, citation=n)
    except NotFound as exc:
        raise Http404(exc.message) from exc
    url = reverse("portal:document", args=[opened.document_id])
    if opened.version is not None:
        url += f"?version={opened.version}#chunk-{opened.chunk}"
    return redirect(url)


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


class UploadForm(forms.Form):
    """Where the upload form's files go: one of the tenant's upload sources, or a new one by name.
    The files themselves are the request's ``files`` (several), read by ``sources``."""

    source = forms.ChoiceField(label="Upload into", required=False)
    new_source = forms.CharField(
        label="New source",
        max_length=200,
        required=False,
        help_text="A name typed here is used instead of the list: a new upload source, or one of the list's.",
    )

    def __init__(self, *args, source_names=(), **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["source"].choices = [(n, n) for n in source_names] + [("", "a new source (name it below)")]
        self.fields["source"].initial = source_names[0] if source_names else ""

    def source_name(self) -> str:
        return self.cleaned_data["new_source"].strip() or self.cleaned_data["source"]


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
        job_ids = _upload(request, tenant, upload_form)
        if job_ids:
            return redirect(_jobs_url("portal:sources", job_ids))
    context = {
        "tenant": tenant,
        "sources": source_overview_with_last_sync(tenant=tenant, user=request.user),
        "upload_form": upload_form,
        "usage": _usage_rows(request, tenant),
        **_jobs_context(tenant, request.user, _job_ids(request.GET.get("jobs", ""))),
    }
    return render(request, "portal/sources.html", context, status=400 if request.method == "POST" else 200)


def _usage_rows(request, tenant) -> list[QuotaUsage] | None:
    """The tenant's usage against each quota (``retrieval.quotas``) for its owners and admins (the
    table ``portal/_usage.html``); ``None`` for other roles."""
    if membership_for_request(request, pick_first=True).role not in USAGE_ROLES:
        return None
    return list(quota_usage(tenant=tenant).values())


def _upload(request, tenant, form: UploadForm) -> list[int]:
    """Upload the request's files as ``form`` says; the ids of the jobs made. Each refused file
    becomes an error message (``django.contrib.messages``, shown after the redirect); a refusal
    of the whole submission is the form's error. A submission over the upload limits was stopped
    while it streamed in (``core.uploads``): its later files and fields were never read, so none
    of it is uploaded and the form says why."""
    refusal = upload_refusal(request)
    if refusal is not None:
        form.add_error(None, f"{refusal.message} Nothing was uploaded.")
        return []
    if not form.is_valid():
        return []
    try:
        outcomes = upload_batch_ingest(
            tenant=tenant, user=request.user, source_name=form.source_name(), files=request.FILES.getlist("files")
        )
    except ApplicationError as exc:
        form.add_error(None, exc.message)
        return []
    for outcome in outcomes:
        if outcome.error:
            messages.error(request, outcome.error)
    job_ids = [outcome.job.pk for outcome in outcomes if outcome.job is not None]
    if not job_ids:
        form.add_error(None, "None of the files was uploaded.")
    return job_ids


def _job_ids(value: str) -> list[int]:
    """The ids in ``?jobs=1,2`` (anything that is not an id is skipped), at most ``_MAX_JOBS_SHOWN``."""
    ids = [int(part) for part in value.split(",")[:_MAX_JOBS_SHOWN] if _JOB_IDS.fullmatch(part.strip())]
    return list(dict.fromkeys(ids))


def _jobs_url(name: str, job_ids: list[int]) -> str:
    return f"{reverse(name)}?jobs={','.join(str(i) for i in job_ids)}"


def _jobs_context(tenant, user, job_ids: list[int]) -> dict:
    """What ``portal/_upload_jobs.html`` renders: the tenant's jobs among ``job_ids`` (others are
    left out), each with a one-line ``summary``, and whether any is still waiting or running."""
    jobs = ingestion_job_list(tenant=tenant, job_ids=job_ids, user=user)
    unfinished = (IngestionJob.Status.PENDING, IngestionJob.Status.RUNNING)
    shown = [job.pk for job in jobs]
    return {
        "jobs": [{"job": job, "summary": _job_summary(job)} for job in jobs],
        "jobs_polling": any(job.status in unfinished for job in jobs),
        "jobs_page_url": _jobs_url("portal:sources", shown) if shown else "",
        "jobs_fragment_url": _jobs_url("portal:upload-jobs", shown) if shown else "",
    }


def _job_summary(job: IngestionJob) -> str:
    """What became of the job: its counts when done, its error when failed, else where it is."""
    if job.status == IngestionJob.Status.DONE:
        result = job.result or {}
        counts = [
            f"{result[key]} {label}"
            for key, label in (
                ("created", "new"),
                ("updated", "updated"),
                ("unchanged", "unchanged"),
                ("duplicate", "duplicate"),
            )
            if result.get(key)
        ]
        documents = sum(result.get(key, 0) for key in ("created", "updated", "unchanged", "duplicate"))
        noun = "document" if documents == 1 else "documents"
        chunks = result.get("chunks", 0)
        return f"{documents} {noun} ({', '.join(counts) or 'none'}), {chunks} chunk{'' if chunks == 1 else 's'} stored"
    if job.status == IngestionJob.Status.FAILED:
        return job.error
    if job.status == IngestionJob.Status.RUNNING:
        stage = (job.progress or {}).get("stage")
        return f"Working: {stage}" if stage else "Working"
    return job.error or "Waiting for a worker"


@require_GET
@tenant_required
def upload_jobs(request, tenant):
    """The job list of ``?jobs=<ids>`` (the fragment ``portal/_upload_jobs.html``, which polls
    here every 2 seconds with htmx while a job is waiting or running, and once all are finished
    offers to reload the page for the new counts); a request not made by htmx goes to the Sources
    page showing the same jobs. The tenant's jobs only: none found is a 404."""
    context = _jobs_context(tenant, request.user, _job_ids(request.GET.get("jobs", "")))
    if not context["jobs"]:
        return HttpResponse(format_html('<p class="errorlist" role="alert">{}</p>', "No such upload jobs."), status=404)
    if not getattr(request, "htmx", False):
        return redirect(context["jobs_page_url"])
    response = render(request, "portal/_upload_jobs.html", {**context, "polled": True})
    patch_vary_headers(response, ["HX-Request"])
    return response


@require_GET
@tenant_required
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
    if diff is not None:  # htmx asks for the diff only (the version links' hx-get)
        return partial_or_page(request, fragment="portal/_diff.html", page="portal/document.html", context=context)
    return render(request, "portal/document.html", context)


def _chosen_version(versions: list, number: str):
    """The version numbered ``number``, or the current one when ``number`` is empty."""
    if not number:
        return next((v for v in versions if v.is_current), versions[0] if versions else None)
    if not _VERSION_NUMBER.fullmatch(number):  # 1-9 ASCII digits: not "²", not 5,000 nines
        return None
    return next((v for v in versions if v.number == int(number)), None)
