"""Asking a question of a tenant's documents: the one entry point for every caller.

The REST ask API and its stream (``people.ask_apis``), the portal's ask page and its stream
(``portal.views``), ``manage.py ask`` and the MCP server all answer through ``ask`` or its
streaming counterpart ``ask_stream``, so a question is answered, kept and refused the same way
whichever way it comes in:

- every entry point builds one ``retrieval.request.AnswerRequest`` (the question and its options),
  its source names resolved for the asker by ``AnswerRequest.for_sources`` (an unknown one, or
  one they may not see, is ``InvalidInput`` with code ``unknown_source``, before anything runs);
- a signed-in member's answer is kept as the next turn of their conversation
  (``people.conversations.conversation_ask``: history for follow-ups, the turn stored), a viewer's
  is answered but not kept, and a run without a user (an operator's command) is answered
  impersonally and not kept;
- the run itself is ``retrieval.pipeline.pipeline_answer``: its pipeline, trace, LLM quota (over
  the tenant's LLM tokens of the day the answer is made without the LLM, ``degraded``) and
  personalization;
- each citation carries the figures its passage holds (``citation_figures``: a PDF figure or an
  office file's picture, with the API URL of its picture), found once for the whole answer under
  the asker's access rules.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

from core.errors import PermissionDenied
from core.replicas import replica_reads
from knowledge.figure_apis import figure_api_url
from knowledge.figures import passage_figures_get
from knowledge.selectors import sources_syncing
from people.conversations import conversation_ask
from retrieval.pipeline import CONFIGURED, pipeline_answer
from retrieval.request import AnswerRequest
from retrieval.runs import AnswerRun
from retrieval.streaming import answer_events

if TYPE_CHECKING:
    from django.contrib.auth.base_user import AbstractBaseUser
    from django.contrib.auth.models import AnonymousUser

    from core.models import Tenant


def ask(
    request: AnswerRequest,
    *,
    tenant: Tenant,
    user: AbstractBaseUser | AnonymousUser | None,
    llm: Any = CONFIGURED,
    on_event: Callable[[str, dict], None] | None = None,
) -> AnswerRun:
    """Answer ``request`` (``retrieval.request.AnswerRequest``: the question, 1-2,000
    characters, with its options; its sources already resolved for ``user``, as
    ``AnswerRequest.for_sources`` does) from ``tenant``'s documents with ``[n]`` citations, as
    ``user``, and keep it as the next turn of their conversation.

    - ``tenant``: the caller's tenant, already resolved (``core.memberships.tenant_for_request``).
    - ``user``: the asker. A member's answer becomes a turn of the request's ``conversation_id``
      (a new conversation without one); a viewer's is answered but not kept; ``None`` (an
      operator's command) answers impersonally, not kept. Their access rules always apply.
    - ``llm`` replaces the configured client (``None``: no LLM).
    - ``on_event(event, data)``: called as the run goes (``"step"``, ``"short_answer"``,
      ``"token"``), as ``pipeline_answer`` does.

    Returns the ``AnswerRun`` (``as_dict()`` is the ask API's JSON); ``conversation_id`` and
    ``turn`` are set when the answer was kept; ``syncing`` names the sources (of those ``user`` may
    see) still syncing, whose documents the answer may lack; ``figures`` holds each cited
    passage's figures (``citation_figures``).

    Errors (``core.errors``, each with a stable code): ``InvalidInput`` for a bad question or
    option, ``NotFound`` for a conversation that is not the user's in this tenant,
    ``PermissionDenied`` for an anonymous user, or for continuing a conversation as a viewer or
    without a user. Nothing is stored when one is raised.
    """
    return _answer(request, tenant=tenant, user=user, llm=llm, on_event=on_event)


def ask_stream(
    request: AnswerRequest,
    *,
    tenant: Tenant,
    user: AbstractBaseUser | AnonymousUser | None,
    llm: Any = CONFIGURED,
    present: Callable[[dict], Any] | None = None,
) -> Iterator[str]:
    """``ask`` as Server-Sent Events frames (``retrieval.streaming.answer_events``): ``step`` after
    each stage, ``short_answer`` and ``token`` while the LLM writes, then one ``answer`` (the run's
    ``as_dict()``, with ``conversation_id`` and ``turn`` when kept, passed through
    ``present(answer) -> data`` when given) or one ``error`` (``{"error": {"code", "message"}}``).

    Arguments as ``ask``'s. Every error becomes the ``error`` frame (an unknown source name is
    refused earlier, when the request is built). The run happens in a worker thread started on
    the first ``next()``; closing the iterator early stops it.
    """
    return answer_events(request, tenant=tenant, user=user, present=present, runner=_answer, llm=llm)


@replica_reads  # retrieval reads from a healthy replica; the trace and the turn are written to the primary
def _answer(request: AnswerRequest, *, tenant, user, **run_options) -> AnswerRun:
    """The run behind ``ask`` and ``ask_stream``; ``run_options`` are ``pipeline_answer``'s
    keyword arguments (``llm``, ``on_event``)."""
    if user is None:
        if request.conversation_id is not None:
            raise PermissionDenied("Conversations need a signed-in user.")
        run = pipeline_answer(request, tenant=tenant, user=None, **run_options)
    else:
        run = conversation_ask(request, tenant=tenant, user=user, **run_options)
    run.syncing = sources_syncing(tenant=tenant, user=user)
    run.figures = citation_figures(run, tenant=tenant, user=user)
    return run


def citation_figures(run: AnswerRun, *, tenant: Tenant, user) -> dict[int, list[dict]]:
    """The figures each of ``run``'s cited passages holds, by citation number (citations without
    any are left out): ``{"index" (its place in the document's figure list), "caption", "page"
    (1-based; a .pptx's slide; ``None`` without one), "url" (its picture's API path,
    ``knowledge.figure_apis.DocumentFigureApi``)}``, as ``knowledge.figures.passage_figures_get``
    finds them for ``user`` (``None``: an operator, no user-level rules): a figure of the cited
    version when it is its document's current one and its picture can be had. At most three
    queries for the whole answer, none when no cited passage holds a figure's line."""
    cited = {
        c.n: {
            "n": c.n,
            "document_id": c.passage.document.pk,
            "version": c.passage.version.number,
            "kind": c.passage.anchor.kind,
            "text": c.passage.text,
        }
        for c in run.answer.citations
    }
    found = passage_figures_get(tenant=tenant, user=user, citations=list(cited.values()))
    return {
        n: [
            {
                "index": figure.index,
                "caption": figure.caption,
                "page": figure.page,
                "url": figure_api_url(cited[n]["document_id"], cited[n]["version"], figure.index),
            }
            for figure in figures
        ]
        for n, figures in found.items()
    }
