"""Server-rendered portal views: thin wrappers that parse input, call a selector or service, render.

Every view runs for a signed-in user and resolves the user's tenant first; a user without a
membership gets a 403 page. Document text is only ever escaped (Django autoescape, or
``escape``/``format_html`` per segment when citations are linked).
"""

from __future__ import annotations

import re
from functools import wraps

from django import forms
from django.contrib.auth.decorators import login_required
from django.http import Http404, JsonResponse, StreamingHttpResponse
from django.shortcuts import render
from django.template.loader import render_to_string
from django.urls import reverse
from django.utils.html import escape, format_html
from django.utils.safestring import SafeString
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from core.errors import ApplicationError, NotFound, PermissionDenied
from knowledge.selectors import chunk_list_for_version, document_get, tenant_for_user
from retrieval.pipeline import PIPELINE_NAMES, pipeline_answer
from retrieval.streaming import CONTENT_TYPE, HEADERS, answer_events

# Same pattern as the one the generate stage writes citations with: "[n]".
_CITATION = re.compile(r"\[(\d{1,3})\]")
_VERSION_NUMBER = re.compile(r"[1-9][0-9]{0,8}")


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


def tenant_required(view):
    """Sign-in required; the view receives the user's tenant after ``request``, or a 403 page."""

    @wraps(view)
    def wrapper(request, *args, **kwargs):
        try:
            tenant = tenant_for_user(request.user)
        except PermissionDenied as exc:
            return render(request, "portal/forbidden.html", {"message": exc.message}, status=403)
        return view(request, tenant, *args, **kwargs)

    return login_required(wrapper)


def citation_url(citation: dict) -> str:
    """The document page of the cited version, scrolled to the cited chunk."""
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


@require_http_methods(["GET", "POST"])
@tenant_required
def ask(request, tenant):
    form = AskForm(request.POST) if request.method == "POST" else AskForm()
    context = {"form": form, "tenant": tenant}
    if form.is_valid():
        try:
            answer = pipeline_answer(
                tenant=tenant,
                question=form.cleaned_data["question"],
                pipeline=form.cleaned_data["pipeline"] or None,
                user=request.user,
            ).as_dict()
        except ApplicationError as exc:
            form.add_error("question", exc.message)
        else:
            context.update(answer_context(answer))
    return render(request, "portal/ask.html", context)


def answer_context(answer: dict) -> dict:
    """What ``portal/_answer.html`` renders: ``answer`` (``AnswerRun.as_dict()``), its text as
    escaped HTML with linked ``[n]`` (``answer_html``) and its ``citations`` with their ``url``."""
    citations = [{**c, "url": citation_url(c)} for c in answer["citations"]]
    return {
        "answer": answer,
        "answer_html": answer_with_links(answer["answer"], {c["n"]: c["url"] for c in citations}),
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
        html = render_to_string("portal/_answer.html", answer_context(answer), request=request)
        return {**answer, "html": html}

    events = answer_events(
        tenant=tenant,
        user=request.user,
        present=present,
        question=form.cleaned_data["question"],
        pipeline=form.cleaned_data["pipeline"] or None,
    )
    return StreamingHttpResponse(events, content_type=CONTENT_TYPE, headers=HEADERS)


@require_GET
@tenant_required
def document_detail(request, tenant, document_id: int):
    try:
        document = document_get(tenant=tenant, document_id=document_id)
    except NotFound as exc:
        raise Http404(exc.message) from exc
    versions = list(document.versions.all())  # newest first, with chunk_count
    version = _chosen_version(versions, request.GET.get("version", ""))
    if version is None:
        raise Http404("No such version.")
    chunks = chunk_list_for_version(tenant=tenant, version_id=version.pk)
    return render(
        request,
        "portal/document.html",
        {"document": document, "versions": versions, "version": version, "chunks": list(chunks)},
    )


def _chosen_version(versions: list, number: str):
    """The version numbered ``number``, or the current one when ``number`` is empty."""
    if not number:
        return next((v for v in versions if v.is_current), versions[0] if versions else None)
    if not _VERSION_NUMBER.fullmatch(number):  # 1-9 ASCII digits: not "²", not 5,000 nines
        return None
    return next((v for v in versions if v.number == int(number)), None)
