"""Reads of the retrieval app: keyword-only selectors, every one scoped to a tenant."""

from __future__ import annotations

from django.db.models import Prefetch

from core.errors import NotFound
from knowledge.access import access_scope_get
from retrieval.models import Trace, TraceStep


def trace_get(*, tenant, trace_id: int, user=None) -> Trace:
    """The tenant's trace ``trace_id`` with its user and its steps in run order.

    ``NotFound`` if there is no such trace or it belongs to another tenant (the same error, so
    an id of another tenant reveals nothing). Given ``user``, in a tenant with access rules only
    their own traces are found unless they see the whole tenant (owners, admins:
    ``knowledge.access``), since a trace shows the passages its asker was allowed to see. The
    trace of a run in a conversation with attached files is its asker's alone, whoever asks for it
    (``knowledge.attachments``: its scope step names the files).
    """
    traces = Trace.objects.for_tenant(tenant)
    if user is not None and access_scope_get(tenant=tenant, user=user).restricts:
        traces = traces.filter(user_id=user.pk)
    elif user is not None:
        scope = TraceStep.objects.filter(trace_id=trace_id, stage="scope")
        if scope.filter(summary__filter__has_key="conversation_documents").exists():
            traces = traces.filter(user_id=user.pk)
    try:
        return (
            traces.select_related("user")
            .prefetch_related(Prefetch("steps", queryset=TraceStep.objects.order_by("order")))
            .get(pk=trace_id)
        )
    except Trace.DoesNotExist:
        raise NotFound(f"Trace {trace_id} does not exist.")
