"""Portal pages of walks a person steers: start one, watch its rounds live, pause, edit, resume, stop.

``walks`` starts a walk (``retrieval.walks.steering.walk_start``) and lists the person's recent
ones; ``walk_detail`` shows one, and while it runs its state fragment (``walk_state``) is polled
by htmx every second, so each round's facts and next queries appear as they come. A paused walk
shows its facts as editable lines (remove, correct), its next queries (one per line) and its
question; "Resume" saves the edits and lets it go on, "Stop" answers from what it has.
"""

from __future__ import annotations

from django import forms
from django.http import Http404
from django.shortcuts import redirect, render
from django.utils.cache import patch_vary_headers
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from core.errors import ApplicationError, NotFound
from portal.decorators import tenant_required
from retrieval.config import MAX_QUERY_CHARS
from retrieval.walks import steering
from retrieval.walks.models import Walk
from retrieval.walks.selectors import walk_state


class WalkForm(forms.Form):
    question = forms.CharField(max_length=MAX_QUERY_CHARS, widget=forms.TextInput(attrs={"autocomplete": "off"}))
    pause_after = forms.IntegerField(
        min_value=1, max_value=steering.MAX_PAUSE_AFTER, required=False, label="Pause after round"
    )
    k = forms.IntegerField(min_value=1, max_value=20, initial=5, required=False, label="Chunks per query")


def _walk(tenant, user, walk_id: int) -> Walk:
    try:
        return steering.walk_get(tenant=tenant, user=user, walk_id=walk_id)
    except NotFound as exc:
        raise Http404(exc.message) from exc


@require_http_methods(["GET", "POST"])
@tenant_required
def walks(request, tenant):
    """Start a walk (POST, then its page) and the person's recent walks."""
    form = WalkForm(request.POST or None)
    if request.method == "POST" and form.is_valid():
        try:
            walk = steering.walk_start(
                tenant=tenant,
                user=request.user,
                question=form.cleaned_data["question"],
                pause_after=form.cleaned_data["pause_after"],
                k=form.cleaned_data["k"] or 5,
            )
        except ApplicationError as exc:
            form.add_error("question", exc.message)
        else:
            return redirect("portal:walk", walk_id=walk.pk)
    recent = Walk.objects.for_tenant(tenant).filter(user=request.user, steered=True)[:20]
    status = 400 if request.method == "POST" else 200
    return render(request, "portal/walks.html", {"form": form, "walks": recent}, status=status)


@require_GET
@tenant_required
def walk_detail(request, tenant, walk_id: int):
    """One walk: its rounds, facts, next queries and answer (live while it runs)."""
    walk = _walk(tenant, request.user, walk_id)
    return render(request, "portal/walk.html", {"walk": walk_state(walk)})


@require_GET
@tenant_required
def walk_fragment(request, tenant, walk_id: int):
    """The walk's state alone (``portal/_walk_state.html``), polled by htmx while it runs."""
    walk = _walk(tenant, request.user, walk_id)
    if not getattr(request, "htmx", False):
        return redirect("portal:walk", walk_id=walk_id)
    response = render(request, "portal/_walk_state.html", {"walk": walk_state(walk)})
    patch_vary_headers(response, ["HX-Request"])
    return response


def _edits(post) -> dict:
    """``walk_edit``'s arguments from the paused walk's form."""
    facts = [int(value) for value in post.getlist("fact") if value.isdigit()]
    removed = [int(value) for value in post.getlist("remove") if value.isdigit()]
    edited = {}
    for fact_id in facts:
        text = post.get(f"fact-{fact_id}")
        if text is not None and fact_id not in removed:
            edited[fact_id] = text
    queries = [line.strip() for line in post.get("next_queries", "").splitlines() if line.strip()]
    return {
        "question": post.get("question") or None,
        "remove_facts": removed,
        "edit_facts": edited,
        "next_queries": queries,
    }


@require_POST
@tenant_required
def walk_steer(request, tenant, walk_id: int):
    """Pause, stop, or save the edits of a paused walk and resume it (``action``)."""
    walk = _walk(tenant, request.user, walk_id)
    action = request.POST.get("action", "")
    try:
        if action == "pause":
            steering.walk_pause(walk=walk)
        elif action == "stop":
            steering.walk_stop(walk=walk)
        elif action == "resume":
            walk = steering.walk_edit(walk=walk, **_edits(request.POST))
            steering.walk_resume(walk=walk)
        else:
            raise ApplicationError("Unknown action.")
    except ApplicationError as exc:
        walk.refresh_from_db()
        context = {"walk": walk_state(walk), "error": exc.message}
        return render(request, "portal/walk.html", context, status=exc.status)
    return redirect("portal:walk", walk_id=walk_id)
