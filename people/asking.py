"""Asking a question of a tenant's documents: the one entry point for every caller.

The REST ask API and its stream (``people.ask_apis``), the portal's ask page and its stream
(``portal.views``), ``manage.py ask`` and the MCP server all answer through ``ask`` or its
streaming counterpart ``ask_stream``, so a question is answered, kept and refused the same way
whichever way it comes in:

- the sources named are resolved for the asker first (an unknown one, or one they may not see, is
  ``InvalidInput`` with code ``unknown_source``, before anything runs);
- a signed-in member's answer is kept as the next turn of their conversation
  (``people.conversations.conversation_ask``: history for follow-ups, the turn stored), a viewer's
  is answered but not kept, and a run without a user (an operator's command) is answered
  impersonally and not kept;
- the run itself is ``retrieval.pipeline.pipeline_answer``: its pipeline, trace, LLM quota (over
  the tenant's LLM tokens of the day the answer is made without the LLM, ``degraded``) and
  personalization.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from datetime import date
from typing import TYPE_CHECKING, Any

from core.errors import PermissionDenied
from core.replicas import replica_reads
from knowledge.selectors import source_ids_for_names, sources_syncing
from people.conversations import conversation_ask
from retrieval.pipeline import CONFIGURED, AnswerRun, pipeline_answer
from retrieval.streaming import answer_events

if TYPE_CHECKING:
    from django.contrib.auth.base_user import AbstractBaseUser
    from django.contrib.auth.models import AnonymousUser

    from core.models import Tenant


def ask(
    *,
    tenant: Tenant,
    user: AbstractBaseUser | AnonymousUser | None,
    question: str,
    conversation_id: int | None = None,
    pipeline: str | None = None,
    k: int = 5,
    strategy: str | None = None,
    window_size: int | None = None,
    reverse_pack: bool = True,
    use_llm: bool = True,
    sources: Sequence[str] | None = None,
    as_of: date | None = None,
    collapse: bool | None = None,
    personalize: bool = True,
    summaries: bool | None = None,
    llm: Any = CONFIGURED,
    on_event: Callable[[str, dict], None] | None = None,
) -> AnswerRun:
    """Answer ``question`` (1-2,000 characters) from ``tenant``'s documents with ``[n]`` citations,
    as ``user``, and keep it as the next turn of their conversation.

    - ``tenant``: the caller's tenant, already resolved (``core.memberships.tenant_for_request``).
    - ``user``: the asker. A member's answer becomes a turn of conversation ``conversation_id`` (a
      new conversation without one); a viewer's is answered but not kept; ``None`` (an operator's
      command) answers impersonally, not kept. Their access rules always apply.
    - ``pipeline``: a name of ``retrieval.pipeline.PIPELINE_NAMES`` (default: the tenant's).
    - ``k``: passages in the context, 1-20; ``strategy`` ``"top_n"`` or ``"window"`` and
      ``window_size`` (neighbours on each side, 0-10) pack them (default: the pipeline's);
      ``reverse_pack`` puts the best passage last.
    - ``use_llm``: false answers extractively, without the LLM; ``llm`` replaces the configured
      client (``None``: no LLM).
    - ``sources``: source names to search (default: all the asker may see).
    - ``as_of``: answer from the document versions current on that day.
    - ``collapse`` near-duplicates, let ``summaries`` compete (``None``: the tenant's settings);
      ``personalize`` for the asker (their profile and history; false: as for anyone).
    - ``on_event(event, data)``: called as the run goes (``"step"``, ``"short_answer"``,
      ``"token"``), as ``pipeline_answer`` does.

    Returns the ``AnswerRun`` (``as_dict()`` is the ask API's JSON); ``conversation_id`` and
    ``turn`` are set when the answer was kept; ``syncing`` names the sources (of those ``user`` may
    see) still syncing, whose documents the answer may lack.

    Errors (``core.errors``, each with a stable code): ``InvalidInput`` for a bad question or
    option (``unknown_source`` for a source name), ``NotFound`` for a conversation that is not the
    user's in this tenant, ``PermissionDenied`` for an anonymous user, or for continuing a
    conversation as a viewer or without a user. Nothing is stored when one is raised.
    """
    return _answer(
        tenant=tenant,
        user=user,
        question=question,
        conversation_id=conversation_id,
        source_ids=source_ids_for_names(tenant=tenant, names=list(sources or ()), user=user),
        options={"collapse": collapse, "personalize": personalize, "summaries": summaries},
        pipeline=pipeline,
        k=k,
        strategy=strategy,
        window_size=window_size,
        reverse_pack=reverse_pack,
        use_llm=use_llm,
        as_of=as_of,
        llm=llm,
        on_event=on_event,
    )


def ask_stream(
    *,
    tenant: Tenant,
    user: AbstractBaseUser | AnonymousUser | None,
    question: str,
    conversation_id: int | None = None,
    pipeline: str | None = None,
    k: int = 5,
    strategy: str | None = None,
    window_size: int | None = None,
    reverse_pack: bool = True,
    use_llm: bool = True,
    sources: Sequence[str] | None = None,
    as_of: date | None = None,
    collapse: bool | None = None,
    personalize: bool = True,
    summaries: bool | None = None,
    llm: Any = CONFIGURED,
    present: Callable[[dict], Any] | None = None,
) -> Iterator[str]:
    """``ask`` as Server-Sent Events frames (``retrieval.streaming.answer_events``): ``step`` after
    each stage, ``short_answer`` and ``token`` while the LLM writes, then one ``answer`` (the run's
    ``as_dict()``, with ``conversation_id`` and ``turn`` when kept, passed through
    ``present(answer) -> data`` when given) or one ``error`` (``{"error": {"code", "message"}}``).

    Arguments as ``ask``'s. The source names are resolved before this returns, so an unknown one
    raises ``InvalidInput`` (``unknown_source``) here, before any frame; every later error becomes
    the ``error`` frame. The run happens in a worker thread started on the first ``next()``;
    closing the iterator early stops it.
    """
    source_ids = source_ids_for_names(tenant=tenant, names=list(sources or ()), user=user)
    return answer_events(
        tenant=tenant,
        user=user,
        present=present,
        runner=_answer,
        question=question,
        conversation_id=conversation_id,
        source_ids=source_ids,
        options={"collapse": collapse, "personalize": personalize, "summaries": summaries},
        pipeline=pipeline,
        k=k,
        strategy=strategy,
        window_size=window_size,
        reverse_pack=reverse_pack,
        use_llm=use_llm,
        as_of=as_of,
        llm=llm,
    )


@replica_reads  # retrieval reads from a healthy replica; the trace and the turn are written to the primary
def _answer(
    *, tenant, user, question: str, conversation_id: int | None, source_ids: list[int] | None, **run_options
) -> AnswerRun:
    """The run behind ``ask`` and ``ask_stream``, its sources resolved; ``run_options`` are
    ``pipeline_answer``'s other keyword arguments."""
    if user is None:
        if conversation_id is not None:
            raise PermissionDenied("Conversations need a signed-in user.")
        run = pipeline_answer(tenant=tenant, user=None, question=question, source_ids=source_ids, **run_options)
    else:
        run = conversation_ask(
            tenant=tenant,
            user=user,
            question=question,
            conversation_id=conversation_id,
            source_ids=source_ids,
            **run_options,
        )
    run.syncing = sources_syncing(tenant=tenant, user=user)
    return run
