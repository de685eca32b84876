"""The MCP tools: their arguments (pydantic models, whose JSON Schema the tools list publishes) and
what each does, as plain synchronous Django code.

Every tool acts as one member of one tenant (a ``core.models.Membership``, from the token) and goes
through the services and selectors the REST API uses, so the same access rules, row-level
security, quotas and errors apply:

- ``search``: ``retrieval.search.chunk_search`` (the search API's stages);
- ``ask``: ``people.asking.ask`` (the one asking service: the answer is kept as the next turn of
  the member's conversation, a viewer's is not);
- ``fetch``: ``mcp_server.selectors`` (``knowledge``'s access scope);
- ``list_sources``: ``knowledge.selectors.source_overview``;
- ``attach_file``: ``people.attachments.conversation_file_attach`` (``mcp_server.attachments``).

Errors are ``core.errors.ApplicationError``s (``InvalidInput``, ``NotFound``, ``PermissionDenied``,
``UpstreamError``), which ``mcp_server.server`` turns into tool errors.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from core.errors import InvalidInput
from core.models import Membership
from knowledge.pages import chunk_pages
from knowledge.selectors import source_overview
from knowledge.versions import as_of_parse, version_date
from mcp_server.attachments import AttachFileArguments, attach_file_run
from mcp_server.selectors import chunk_document_versions, chunk_get, document_text_get
from people.asking import ask
from retrieval.config import MAX_QUERY_CHARS, MODES
from retrieval.pipeline import PIPELINE_NAMES
from retrieval.request import AnswerRequest
from retrieval.search import chunk_search

MAX_ID = 2**63 - 1  # the largest database id (bigint)
FETCH_MAX_CHARS = 100_000
FETCH_DEFAULT_CHARS = 20_000

SourceName = Annotated[str, Field(min_length=1, max_length=200)]
AS_OF = Field(
    None,
    pattern=r"^\d{4}-\d{2}-\d{2}$",
    description="YYYY-MM-DD: use the document versions current on that day (default: the current versions).",
)
SOURCES = Field(
    default_factory=list,
    max_length=100,
    description="Names of sources to search (see list_sources); default: every source you may see.",
)


class _Arguments(BaseModel):
    """Tool arguments: unknown names are refused, not ignored."""

    model_config = ConfigDict(extra="forbid")


class SearchArguments(_Arguments):
    query: str = Field(min_length=1, max_length=MAX_QUERY_CHARS, description="What to search for.")
    k: int = Field(10, ge=1, le=50, description="How many chunks to return (1-50).")
    mode: Literal[MODES] = Field(  # type: ignore[valid-type]
        "hybrid", description="hybrid (keywords and meaning, fused), lexical (BM25 keywords) or dense (meaning)."
    )
    sources: list[SourceName] = SOURCES
    as_of: str | None = AS_OF


class AskArguments(_Arguments):
    question: str = Field(min_length=1, max_length=MAX_QUERY_CHARS, description="The question, in plain words.")
    pipeline: Literal[PIPELINE_NAMES] | None = Field(  # type: ignore[valid-type]
        None, description="How to answer: a named pipeline (default: the tenant's, usually 'simple')."
    )
    k: int = Field(5, ge=1, le=20, description="How many passages the answer is written from (1-20).")
    sources: list[SourceName] = SOURCES
    as_of: str | None = AS_OF
    conversation: int | None = Field(
        None,
        ge=1,
        le=MAX_ID,
        description="Ask a follow-up in this conversation (the conversation_id of an earlier answer).",
    )
    extractive: bool = Field(False, description="Answer by quoting the passages' sentences, without the LLM.")


class FetchArguments(_Arguments):
    document_id: int | None = Field(None, ge=1, le=MAX_ID, description="A document's id (search's document_id).")
    chunk_id: int | None = Field(None, ge=1, le=MAX_ID, description="A chunk's id (search's chunk_id).")
    version: int | None = Field(
        None, ge=1, le=2**31 - 1, description="With document_id: this version number (default: the current one)."
    )
    offset: int = Field(0, ge=0, le=2**31 - 1, description="With document_id: the first character to return.")
    max_chars: int = Field(
        FETCH_DEFAULT_CHARS,
        ge=1,
        le=FETCH_MAX_CHARS,
        description=f"With document_id: at most this many characters of the text (1-{FETCH_MAX_CHARS}).",
    )

    @model_validator(mode="after")
    def _one_target(self) -> FetchArguments:
        if (self.document_id is None) == (self.chunk_id is None):
            raise ValueError("give exactly one of document_id and chunk_id")
        if self.chunk_id is not None and self.version is not None:
            raise ValueError("version goes with document_id (a chunk belongs to one version)")
        return self


class ListSourcesArguments(_Arguments):
    pass


# ---- the tools --------------------------------------------------------------------------------


def _as_of(value: str | None):
    return as_of_parse(value)  # InvalidInput (invalid_as_of) for a day that does not exist


def search_run(*, membership: Membership, arguments: SearchArguments) -> dict:
    """``{"results": [...], "count": n}``: the ``k`` best chunks, each with ``rank``, ``score``,
    ``document_id``, ``document`` (its external id), ``title``, ``uri``, ``source``, ``version``,
    ``version_date`` (ISO date), ``version_current``, ``chunk_id``, ``chunk`` (ordinal), ``page`` and
    ``page_end`` (1-based pages of a PDF or presentation, else ``None``), ``kind``, ``heading``,
    ``text`` (and ``also_in``, ``near_duplicates``, ``update`` when there are any)."""
    tenant, user = membership.tenant, membership.user
    search = AnswerRequest.for_sources(
        tenant=tenant,
        user=user,
        sources=arguments.sources,
        question=arguments.query,
        k=arguments.k,
        mode=arguments.mode,
        as_of=_as_of(arguments.as_of),
    )
    response = chunk_search(search, tenant=tenant, user=user)
    results = []
    for result in response.results:
        row = result.as_dict()
        row.pop("components", None)
        for key in ("also_in", "near_duplicates", "update"):
            if not row.get(key):
                row.pop(key, None)
        results.append(row)
    return {"results": results, "count": len(results)}


ANSWER_KEYS = (
    "question",
    "short_answer",
    "lead",
    "answer",
    "found",
    "mode",
    "citation_coverage",
    "unsupported",
    "pipeline",
    "degraded",
    "degraded_reason",
    "trace_id",
    "conversation_id",
    "turn",
    "syncing",
)
CITATION_KEYS = (
    "n",
    "document_id",
    "document",
    "title",
    "uri",
    "version",
    "version_date",
    "version_current",
    "chunk_id",
    "page",
    "page_end",
    "text",
    "update",
    "figures",
)


def ask_run(
    *, membership: Membership, arguments: AskArguments, on_event: Callable[[str, dict], None] | None = None
) -> dict:
    """The cited answer: ``short_answer`` (``""`` when the documents do not hold it, or when the
    question has no one-sentence answer, e.g. a how-to: then ``lead``, the best passage's document,
    title, section and paragraph, leads an extractive answer), ``answer``
    (the explanation with ``[n]`` markers), ``citations`` (``n``, document, ``version``,
    ``version_date``, ``chunk_id``, ``page``/``page_end`` (``None`` without pages), the passage
    ``text``, ``figures``: the figures the passage holds, ``{"index", "caption", "page", "url"}``,
    ``url`` the API path of the figure's picture, which the same ``Bearer`` token may GET; ``[]``
    for none),
    ``found``, ``mode`` (llm or extractive),
    ``pipeline``, ``degraded`` and ``degraded_reason`` (answered without the LLM, e.g. over the
    tenant's daily LLM tokens), ``trace_id``, and ``conversation_id`` and ``turn`` when the answer
    was kept (members; send ``conversation`` back for a follow-up), ``syncing`` (sources still
    syncing, whose documents the answer may lack). ``on_event(event, data)`` is
    called as the run goes (``"step"``, ``"short_answer"``, ``"token"``)."""
    question = AnswerRequest.for_sources(
        tenant=membership.tenant,
        user=membership.user,
        sources=arguments.sources,
        question=arguments.question,
        conversation_id=arguments.conversation,
        pipeline=arguments.pipeline,
        k=arguments.k,
        use_llm=not arguments.extractive,
        as_of=_as_of(arguments.as_of),
    )
    run = ask(question, tenant=membership.tenant, user=membership.user, on_event=on_event)
    data = run.as_dict()
    answer: dict[str, Any] = {key: data.get(key) for key in ANSWER_KEYS}
    answer["citations"] = [
        {key: citation[key] for key in CITATION_KEYS if key in citation} for citation in data.get("citations", [])
    ]
    return answer


def _version_row(version) -> dict:
    return {
        "number": version.number,
        "date": version_date(version).isoformat(),
        "published": version.published_at is not None,
        "is_current": version.is_current,
        "chunks": getattr(version, "chunk_count", None),
    }


def _source_row(source) -> dict:
    return {"id": source.pk, "name": source.name, "kind": source.kind}


def fetch_run(*, membership: Membership, arguments: FetchArguments) -> dict:
    """A document: ``{"type": "document", "document_id", "document", "title", "uri", "source":
    {"id", "name", "kind"}, "deleted", "version": {...}, "versions": [{"number", "date",
    "published", "is_current", "chunks"}], "text", "offset", "length", "next_offset"}``, where
    ``text`` is at most ``max_chars`` characters from ``offset`` of the version's ``length`` and
    ``next_offset`` is where the rest starts (``None`` at the end).

    A chunk: ``{"type": "chunk", "chunk_id", "chunk", "page", "page_end", "heading", "kind", "text",
    "document_id", "document", "title", "uri", "source", "version", "versions"}``.

    ``NotFound`` for an id that is not the tenant's or is hidden from the member;
    ``InvalidInput`` for an ``offset`` past the end of the text.
    """
    tenant, user = membership.tenant, membership.user
    if arguments.chunk_id is not None:
        chunk = chunk_get(tenant=tenant, chunk_id=arguments.chunk_id, user=user)
        version = chunk.version
        document = version.document
        return {
            "type": "chunk",
            "chunk_id": chunk.pk,
            "chunk": chunk.ordinal,
            **chunk_pages(chunk),  # page, page_end in a paged document (PDF), else None
            "heading": chunk.heading,
            "kind": chunk.kind,
            "text": chunk.text,
            "document_id": document.pk,
            "document": document.external_id,
            "title": document.title,
            "uri": document.uri,
            "source": _source_row(document.source),
            "deleted": document.deleted_at is not None,
            "version": _version_row(version),
            "versions": [_version_row(v) for v in chunk_document_versions(tenant=tenant, chunk=chunk)],
        }
    found = document_text_get(tenant=tenant, document_id=arguments.document_id, user=user, version=arguments.version)
    text = found.version.text
    if arguments.offset and arguments.offset >= len(text):
        raise InvalidInput(
            f"offset {arguments.offset} is past the end of the text ({len(text)} characters).", code="invalid_offset"
        )
    end = min(len(text), arguments.offset + arguments.max_chars)
    chosen = next(v for v in found.versions if v.pk == found.version.pk)
    return {
        "type": "document",
        "document_id": found.document.pk,
        "document": found.document.external_id,
        "title": found.document.title,
        "uri": found.document.uri,
        "source": _source_row(found.document.source),
        "deleted": found.document.deleted_at is not None,
        "version": _version_row(chosen),
        "versions": [_version_row(v) for v in found.versions],
        "text": text[arguments.offset : end],
        "offset": arguments.offset,
        "length": len(text),
        "next_offset": end if end < len(text) else None,
    }


def source_rows(*, membership: Membership) -> list[dict]:
    """The sources the member may see, by name: ``id``, ``name``, ``kind``, ``documents`` (live
    documents they may see), ``chunks`` (of current versions), ``newest_published`` (ISO date or
    ``None``), ``last_synced_at`` (ISO time or ``None``) and ``uri`` (its MCP resource)."""
    return [source_row(source) for source in source_overview(tenant=membership.tenant, user=membership.user)]


def source_row(source) -> dict:
    """One row of ``source_rows`` from a source annotated by ``knowledge.selectors.source_overview``."""
    return {
        **_source_row(source),
        "documents": source.document_count,
        "chunks": source.chunk_count,
        "newest_published": source.newest_published.date().isoformat() if source.newest_published else None,
        "last_synced_at": source.last_synced_at.isoformat() if source.last_synced_at else None,
        "uri": source_uri(source.pk),
    }


def list_sources_run(*, membership: Membership, arguments: ListSourcesArguments) -> dict:
    """``{"sources": [...], "count": n}`` (rows as ``source_rows``)."""
    rows = source_rows(membership=membership)
    return {"sources": rows, "count": len(rows)}


def source_uri(source_id: int) -> str:
    """The MCP resource URI of a source: ``kb://sources/<id>``."""
    return f"kb://sources/{source_id}"


def document_uri(document_id: int) -> str:
    """The MCP resource URI of a document: ``kb://documents/<id>``."""
    return f"kb://documents/{document_id}"


@dataclass(frozen=True)
class ToolSpec:
    """One tool as the server lists and runs it."""

    name: str
    title: str
    description: str
    arguments: type[_Arguments]
    run: Callable[..., dict]


TOOLS: dict[str, ToolSpec] = {
    spec.name: spec
    for spec in (
        ToolSpec(
            name="search",
            title="Search the knowledge base",
            description=(
                "Search the team's documents you may see. Returns the best-matching chunks (passages), best "
                "first, each with its text, document (id, title, uri), source, version number, version date, "
                "page (in a PDF; else null) and score. Use fetch with a chunk_id or document_id for more of a document."
            ),
            arguments=SearchArguments,
            run=search_run,
        ),
        ToolSpec(
            name="ask",
            title="Ask the knowledge base",
            description=(
                "Answer a question from the team's documents you may see: a short answer, then an explanation "
                "whose sentences cite passages as [n], with the citations (document, version, date, page, text, "
                "figures: the figures a passage holds, each with its caption, page and the URL of its PNG, "
                "which your token may GET from this server with the same Authorization header). "
                "degraded is true when the answer was made without the language model. The answer is kept in "
                "your conversation: pass its conversation_id as conversation to ask a follow-up."
            ),
            arguments=AskArguments,
            run=ask_run,
        ),
        ToolSpec(
            name="fetch",
            title="Fetch a document or chunk",
            description=(
                "Read one document (document_id: its text, page by page with offset and max_chars; any "
                "version) or one chunk (chunk_id), with the document's versions and its source."
            ),
            arguments=FetchArguments,
            run=fetch_run,
        ),
        ToolSpec(
            name="list_sources",
            title="List the sources",
            description=(
                "The sources of documents you may see (name, kind, number of documents, newest publication "
                "date, last sync). Their names are what search and ask take as sources."
            ),
            arguments=ListSourcesArguments,
            run=list_sources_run,
        ),
        ToolSpec(
            name="attach_file",
            title="Attach a file to a conversation",
            description=(
                "Attach a file of your own (its name with the extension, and its content as base64: PDF, Word, "
                "PowerPoint, Excel, OpenDocument, EPUB, HTML, Markdown, reST or text) to one of your conversations, "
                "or to a new one. Then ask with that conversation_id as conversation: the answer searches the "
                "team's documents and the conversation's files. Only you can find the file, only in that "
                "conversation; it is deleted with the conversation."
            ),
            arguments=AttachFileArguments,
            run=attach_file_run,
        ),
    )
}
