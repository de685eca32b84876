"""What is asked: one frozen object that carries a question from its entry point to the stages.

Every entry point builds one ``AnswerRequest`` (the portal's ask form, the REST ask and search
serializers, the MCP tools, ``manage.py ask/search``, evaluations), and ``people.asking.ask``,
``ask_stream``, ``retrieval.pipeline.pipeline_answer`` and ``pipeline_retrieve`` take it whole; a
run's ``RunState.request`` holds it, and the stages read what they need from it. Who asks (tenant,
user) and how the run is carried out (the LLM client, the event callback, tracing) travel beside
it as keyword arguments: they are not part of the question.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import date

from core.errors import InvalidInput
from knowledge.selectors import source_ids_for_names


def _ints(values) -> tuple[int, ...] | None:
    return None if values is None else tuple(int(value) for value in values)


@dataclass(frozen=True)
class AnswerRequest:
    """One question and how it is to be answered or searched.

    - ``question``: the text asked (a search's query), 1-2,000 characters once stripped; checked
      by the pipeline (``InvalidInput`` when empty or longer).
    - ``k``: passages in an answer's context (1-20, default 5), or results of a search (1-200,
      default 10); ``None`` until the pipeline sets the default.
    - ``pipeline``: a name of ``retrieval.pipeline.PIPELINE_NAMES`` (default: the tenant's; a
      caller that resolved its own ``PipelineSpec`` gives it to the pipeline function beside the
      request); ``mode`` overrides its retrieval mode (hybrid, lexical or dense; searches only).
    - ``strategy`` (``"top_n"`` or ``"window"``) and ``window_size`` (neighbours each side, 0-10)
      pack the passages (default: the pipeline's); ``reverse_pack`` puts the best passage last
      (seed ``advanced-rag-querying.txt``).
    - ``use_llm``: false answers extractively and rewrites without the LLM.
    - ``source_ids``: the sources to search (``None``: all the asker may see); build a request
      from source names with ``for_sources``.
    - ``as_of``: answer from the document versions current on that day.
    - ``collapse`` near-duplicate clusters and let ``summaries`` compete (``None``: the tenant's
      settings); ``personalize`` for the asker (false: as for anyone).
    - ``history``: the conversation's earlier questions, oldest first (follow-ups are condensed).
    - ``conversation_id``: the conversation a member's answer continues (``None``: a new one);
      ``conversation_documents``: the files attached to it, searched with the tenant's documents.

    Sequences are kept as tuples, so a request is immutable and safe to share between threads;
    ``replace(request, field=value)`` (``dataclasses.replace``) makes a changed copy. A value of
    the wrong type is ``InvalidInput`` when the request is built.
    """

    question: str
    k: int | None = None
    pipeline: str | None = None
    mode: str | None = None
    strategy: str | None = None
    window_size: int | None = None
    reverse_pack: bool = True
    use_llm: bool = True
    source_ids: tuple[int, ...] | None = None
    as_of: date | None = None
    collapse: bool | None = None
    personalize: bool = True
    summaries: bool | None = None
    history: tuple[str, ...] = ()
    conversation_id: int | None = None
    conversation_documents: tuple[int, ...] = ()

    def __post_init__(self):
        set_ = object.__setattr__  # the dataclass is frozen; normalize once, here
        set_(self, "question", str(self.question or ""))
        set_(self, "source_ids", _ints(self.source_ids))
        set_(self, "history", tuple(str(q) for q in self.history or ()))
        set_(self, "conversation_documents", _ints(self.conversation_documents) or ())
        for name in ("reverse_pack", "use_llm", "personalize"):
            if not isinstance(getattr(self, name), bool):
                raise InvalidInput(f"Option {name!r} must be true or false, not {getattr(self, name)!r}.")
        for name in ("collapse", "summaries"):
            if getattr(self, name) is not None and not isinstance(getattr(self, name), bool):
                raise InvalidInput(f"Option {name!r} must be true or false, not {getattr(self, name)!r}.")
        if self.k is not None and (isinstance(self.k, bool) or not isinstance(self.k, int)):
            raise InvalidInput(f"k must be a whole number, not {self.k!r}.")

    @classmethod
    def for_sources(cls, *, tenant, user, sources: Sequence[str] = (), **values) -> AnswerRequest:
        """A request for ``user`` in ``tenant`` that searches the sources named ``sources`` (all
        when empty), with the other fields ``values``. An unknown name, or one ``user`` may not
        see, is ``InvalidInput`` with code ``unknown_source``
        (``knowledge.selectors.source_ids_for_names``): before anything runs."""
        return cls(source_ids=source_ids_for_names(tenant=tenant, names=list(sources or ()), user=user), **values)
