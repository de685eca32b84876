"""The Notion connector: the pages and database rows shared with an internal integration.

Built on notion-client (API version ``NOTION_VERSION``), pointed at ``source.location``
(``https://api.notion.com/`` by default), ``secret`` the integration's token; every connection
goes through ``core.outbound.connect`` (``guarded_httpx_transport``).

What is read
    ``POST /v1/search`` (pages only, 100 a request, newest ``last_edited_time`` first) lists the
    pages and database rows shared with the integration. A page's blocks
    (``GET /v1/blocks/{id}/children``, 100 a request, nested ones in turn) become Markdown;
    a row's properties come first, one ``Name: value`` line each. Files are named, not read.
    The place is the database's title (``GET /v1/databases/{id}``), the parent page's title, or
    the workspace's name (``GET /v1/users/me``); the author is the page's creator
    (``GET /v1/users/{id}``, once per person; the user id without "Read user information").

Changes
    Notion rounds ``last_edited_time`` to the minute. ``changes`` reads the search down to the
    checkpoint ``{"edited": <the last minute read>, "read_at": <when>}`` and yields the pages
    oldest first, the last page of each minute with the checkpoint that holds once it is stored.
    The checkpoint's minute is read again unless it was over when read (``SETTLED``), so a later
    edit in it is not lost. ``listing`` is the whole search (fingerprint: ``last_edited_time``).

Permissions
    Notion's API does not tell an integration who may read a page: every page is ``PUBLIC``
    (the whole tenant), and there are no groups.

Options (``source.options``): ``databases`` (default true: read database rows) and ``authors``
(default true: look up authors' names).
"""

from __future__ import annotations

import logging
import re
import socket
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from functools import partial
from itertools import islice

import httpx
from django.conf import settings
from notion_client import Client, RetryOptions
from notion_client.errors import HTTPResponseError, NotionClientErrorBase
from notion_client.helpers import iterate_paginated_api

from core.errors import InvalidInput
from core.outbound import FETCH_FAILED, AddressNotAllowed, connect
from knowledge.connectors.base import PUBLIC, CredentialRejected, Item, Permission, SourceGroup, SourceUnreachable
from knowledge.connectors.http import MAX_RESPONSE_BYTES, MAX_RETRY_AFTER_S, RETRY_STATUSES, retry_caps, status_raise
from knowledge.ingestion.readers import ReadDocument, read_bytes

KIND = "notion"
NOTION_VERSION = "2025-09-03"
PAGE_SIZE = 100  # the API's largest page, for search and block children
MAX_DEPTH = 16  # nested blocks read below a page (Notion's editor nests far less)
PLACE_HOPS = 4  # parent blocks climbed to find the page or database a page sits in
CHECK_PAGES = 1000  # the pages ``check`` counts at most (11 search requests)
OPTIONS = {"databases": True, "authors": True}
# A minute of ``last_edited_time`` is over, and no later edit can carry it, once the clock is this
# far past its start (the minute, and room for the clocks of Notion and of this server to differ).
SETTLED = timedelta(minutes=6)
PAGE_FILTER = {"property": "object", "value": "page"}
NEWEST_FIRST = {"direction": "descending", "timestamp": "last_edited_time"}


# -- HTTP ----------------------------------------------------------------------------------------


def guarded_httpx_transport(**options) -> httpx.BaseTransport:
    """An ``httpx.HTTPTransport`` (httpx and httpcore, not the ``httpx2`` fork) whose every
    connection goes through ``core.outbound.connect``, with no proxy and bodies capped at
    ``MAX_RESPONSE_BYTES`` (``SourceUnreachable`` past it). ``options`` go to ``HTTPTransport``
    (``retries``: connection attempts retried)."""
    import httpcore
    from httpcore._backends.sync import SyncBackend, SyncStream

    class GuardedBackend(SyncBackend):
        def connect_tcp(self, host, port, timeout=None, local_address=None, socket_options=None):
            try:
                sock = connect(host, port, timeout, socket_options=socket_options or ())
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            except TimeoutError as exc:
                raise httpcore.ConnectTimeout(FETCH_FAILED) from exc
            except OSError as exc:
                raise httpcore.ConnectError(FETCH_FAILED) from exc
            return SyncStream(sock)

        def connect_unix_socket(self, *args, **kwargs):
            raise httpcore.ConnectError(FETCH_FAILED)

    transport = _CappedTransport(trust_env=False, **options)
    transport._pool._network_backend = GuardedBackend()  # httpcore's ConnectionPool(network_backend=...)
    return transport


class _CappedBody(httpx.SyncByteStream):
    """A response body that refuses to read past ``MAX_RESPONSE_BYTES``."""

    def __init__(self, stream):
        self._stream = stream

    def __iter__(self):
        read = 0
        for chunk in self._stream:
            read += len(chunk)
            if read > MAX_RESPONSE_BYTES:
                raise SourceUnreachable(f"Notion sent an answer larger than {MAX_RESPONSE_BYTES // 2**20} MB.")
            yield chunk

    def close(self):
        self._stream.close()


class _CappedTransport(httpx.HTTPTransport):
    """An ``HTTPTransport`` asking for uncompressed answers (so the bytes counted are the bytes
    kept) and capping them with ``_CappedBody``."""

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        request.headers["Accept-Encoding"] = "identity"
        response = super().handle_request(request)
        capped = _CappedBody(response.stream)
        return httpx.Response(
            response.status_code, headers=response.headers, stream=capped, extensions=response.extensions
        )


class _NotionClient(Client):
    """notion-client's own retry loop, with the connectors' policy (``knowledge.connectors.http``):
    every answer in ``RETRY_STATUSES`` is retried, whatever the method (search is a POST that
    only reads) and whatever the body (a proxy's 502 is not Notion's JSON); the wait is the
    answer's ``Retry-After`` (seconds, at most ``MAX_RETRY_AFTER_S``), else
    ``KB_CONNECTOR_BACKOFF_S`` x 2^attempt, at most ``MAX_BACKOFF_S`` (``RetryCaps.backoff``)."""

    def _can_retry(self, error: Exception, method: str) -> bool:
        return isinstance(error, HTTPResponseError) and error.status in RETRY_STATUSES

    def _calculate_retry_delay(self, error: Exception, attempt: int) -> float:
        value = error.headers.get("retry-after", "").strip() if isinstance(error, HTTPResponseError) else ""
        if re.fullmatch(r"\d{1,9}(\.\d+)?", value):  # seconds (Notion's form; an HTTP date gets the backoff)
            return min(float(value), MAX_RETRY_AFTER_S)
        return retry_caps().backoff(attempt)


def _options(options: dict) -> dict:
    """``OPTIONS`` overlaid with ``options``; ``InvalidInput`` for an unknown key or a non-bool value."""
    unknown = sorted(set(options) - set(OPTIONS))
    if unknown:
        raise InvalidInput(
            f"Unknown Notion option(s): {', '.join(unknown)} (known: {', '.join(OPTIONS)}).", code="invalid_options"
        )
    for key, value in options.items():
        if not isinstance(value, bool):
            raise InvalidInput(f"The Notion option {key!r} is true or false, not {value!r}.", code="invalid_options")
    return {**OPTIONS, **options}


# -- rendering -----------------------------------------------------------------------------------


def _plain(rich_text) -> str:
    """The text of a rich-text array (mentions and equations as Notion displays them)."""
    return "".join(part.get("plain_text", "") for part in rich_text or [])


def _page_title(page: dict) -> str:
    for prop in page.get("properties", {}).values():
        if prop.get("type") == "title":
            return _plain(prop.get("title")).strip()
    return ""


def _notion_url(object_id: str) -> str:
    return f"https://www.notion.so/{object_id.replace('-', '')}"


def _when(value: str) -> datetime:
    """An API timestamp (``2025-01-06T09:00:00.000Z``) as an aware datetime."""
    return datetime.fromisoformat(value)


def _names(values) -> str:
    return ", ".join(value.get("name") or value.get("id", "") for value in values)


# How each kind of page property reads as text; the others (relations, rollups, timestamps, the
# people the page object already names) hold nothing to read.
_PROPERTY_TEXT = {
    "title": _plain,
    "rich_text": _plain,
    "select": lambda value: value.get("name", ""),
    "status": lambda value: value.get("name", ""),
    "multi_select": _names,
    "people": _names,
    "files": _names,
    "date": lambda value: value.get("start", "") + (f" → {value['end']}" if value.get("end") else ""),
    "checkbox": lambda value: "yes" if value else "no",
    "formula": lambda value: str(value.get(value.get("type", ""), "") or ""),
    "unique_id": lambda value: "-".join(str(p) for p in (value.get("prefix"), value.get("number")) if p is not None),
    "number": str,
    "url": str,
    "email": str,
    "phone_number": str,
}


def _property_text(prop: dict) -> str:
    """A page property's value as text ("" when empty or of a kind ``_PROPERTY_TEXT`` skips)."""
    kind = prop.get("type", "")
    value = prop.get(kind)
    if kind not in _PROPERTY_TEXT or value in (None, "", [], {}):
        return ""
    return _PROPERTY_TEXT[kind](value)


def _properties_markdown(page: dict) -> list[str]:
    lines = []
    for name, prop in page.get("properties", {}).items():
        text = "" if prop.get("type") == "title" else _property_text(prop).strip()
        if text:
            lines.append(f"{name}: {text}")
    return lines


def _table_markdown(rows: list[dict]) -> list[str]:
    """A table's ``table_row`` blocks as a Markdown table (the first row as its header)."""
    cells = [[_plain(cell).replace("|", "\\|") for cell in row.get("table_row", {}).get("cells", [])] for row in rows]
    if not cells:
        return []
    width = max(len(row) for row in cells)
    lines = ["| " + " | ".join(row + [""] * (width - len(row))) + " |" for row in cells]
    return [lines[0], "|" + " --- |" * width, *lines[1:], ""]


_LIST_KINDS = ("bulleted_list_item", "numbered_list_item", "to_do", "toggle")
_CONTAINER_KINDS = ("column_list", "column", "synced_block", "template")


def _block_line(block: dict, number: int) -> str:
    """One block's own text as a Markdown line (or fenced block), without its children."""
    kind = block.get("type", "")
    data = block.get(kind) or {}
    text = _plain(data.get("rich_text"))
    caption = _plain(data.get("caption"))
    if kind.startswith("heading_") and kind[-1].isdigit():
        return "#" * (int(kind[-1]) + 1) + " " + text  # the page title is the only "#"
    if kind == "bulleted_list_item" or kind == "toggle":
        return f"- {text}"
    if kind == "numbered_list_item":
        return f"{number}. {text}"
    if kind == "to_do":
        return f"- [{'x' if data.get('checked') else ' '}] {text}"
    if kind in ("quote", "callout"):
        return f"> {text}"
    if kind == "code":
        return f"```{data.get('language', '')}\n{text}\n```" + (f"\n{caption}" if caption else "")
    if kind == "equation":
        return f"$$ {data.get('expression', '')} $$"
    if kind == "divider":
        return "---"
    if kind in ("child_page", "child_database"):
        return f"[{data.get('title') or 'Untitled'}]({_notion_url(block.get('id', ''))})"
    if kind == "link_to_page":
        target = data.get(data.get("type", ""), "")
        return f"[Linked page]({_notion_url(target)})" if isinstance(target, str) and target else ""
    if kind in ("bookmark", "embed", "link_preview"):
        return " ".join(part for part in (caption, data.get("url", "")) if part)
    if kind in ("image", "file", "pdf", "video", "audio"):
        name = data.get("name") or (data.get(data.get("type", "")) or {}).get("url", "").rsplit("/", 1)[-1]
        return f"[{kind}: {caption or name.split('?', 1)[0]}]"
    return text  # paragraph, and kinds whose text is all there is


# -- the connector -------------------------------------------------------------------------------


class NotionConnector:
    """The Notion ``Connector`` (module docstring); keys are page ids."""

    kind = KIND
    follows_permissions = True

    def __init__(self, source, secret: str):
        self.source = source
        self.options = _options(source.options or {})
        retries = retry_caps().retries
        self.client = _NotionClient(
            auth=secret,
            base_url=re.sub(r"(/v1)?/*$", "", source.location or "https://api.notion.com"),  # it adds /v1/
            notion_version=NOTION_VERSION,
            timeout_ms=settings.KB_CONNECTOR_TIMEOUT_S * 1000,
            retry=RetryOptions(max_retries=retries),
            logger=logging.getLogger(__name__),  # not notion-client's own, which prints to stdout
            client=httpx.Client(transport=guarded_httpx_transport(retries=retries), trust_env=False),
        )
        self._places: dict[str, str] = {}  # page, database or block id -> the place it names
        self._names: dict[str, str] = {}  # user id -> name
        self._names_readable = self.options["authors"]
        self._workspace: str | None = None

    # -- requests --

    def _api(self, call, *args, whole: bool = False, **kwargs):
        """``call(*args, **kwargs)`` (a notion-client endpoint) after its retries: 401, 429 and 5xx
        raise ``CredentialRejected`` / ``SourceUnreachable``, and so does any other 4xx when
        ``whole`` (a request the whole sync needs); else it raises notion-client's
        ``HTTPResponseError`` for the caller. A connection that fails raises ``SourceUnreachable``."""
        try:
            return call(*args, **kwargs)
        except HTTPResponseError as exc:
            what = f"Notion ({self.client.options.base_url})"
            status_raise(exc.status, what=what, detail=str(exc))
            if whole and exc.status == 403:
                raise CredentialRejected(
                    f"{what} refused the integration (HTTP 403: {str(exc)[:200]}): give it the "
                    '"Read content" capability.'
                )
            if whole:
                raise SourceUnreachable(f"{what} answered HTTP {exc.status}: {str(exc)[:200]}")
            raise
        except AddressNotAllowed as exc:
            raise SourceUnreachable(f"Notion at {self.source.location}: {exc.message}.") from exc
        except (httpx.TransportError, NotionClientErrorBase) as exc:
            raise SourceUnreachable(f"Notion at {self.source.location}: {FETCH_FAILED} ({exc}).") from exc

    def _search(self) -> Iterator[dict]:
        """Every page shared with the integration, newest ``last_edited_time`` first."""
        search = partial(self._api, self.client.search, whole=True)
        for page in iterate_paginated_api(search, filter=PAGE_FILTER, sort=NEWEST_FIRST, page_size=PAGE_SIZE):
            if self.options["databases"] or not _is_row(page):
                yield page

    def _children(self, block_id: str) -> Iterator[dict]:
        yield from iterate_paginated_api(
            partial(self._api, self.client.blocks.children.list), block_id=block_id, page_size=PAGE_SIZE
        )

    # -- the Connector protocol --

    def check(self) -> str:
        me = self._api(self.client.users.me, whole=True)
        pages = list(islice(self._search(), CHECK_PAGES + 1))
        rows = sum(1 for page in pages[:CHECK_PAGES] if _is_row(page))
        count = f"more than {CHECK_PAGES:,}" if len(pages) > CHECK_PAGES else f"{len(pages):,}"
        workspace = (me.get("bot") or {}).get("workspace_name") or "workspace"
        return (
            f"Notion {workspace}, as the integration {me.get('name') or me.get('id')}: {count} pages shared "
            f"with it ({rows:,} of them database rows), each visible to the whole tenant."
        )

    def changes(self, checkpoint: dict) -> Iterator[Item]:
        read_at = datetime.now(UTC)
        since = _when(checkpoint["edited"]) if checkpoint.get("edited") else None
        settled = since is not None and _when(checkpoint.get("read_at") or checkpoint["edited"]) >= since + SETTLED
        changed = []
        for page in self._search():
            edited = _when(page["last_edited_time"])
            if since is not None and (edited < since or (settled and edited == since)):
                break
            changed.append(page)
        self._places.update((page["id"], _page_title(page) or "Untitled") for page in changed)
        changed.reverse()
        for index, page in enumerate(changed):
            item = self._item(page)
            after = changed[index + 1]["last_edited_time"] if index + 1 < len(changed) else None
            if after != page["last_edited_time"]:  # the last page of its minute: the minute is all read
                item.checkpoint = {"edited": page["last_edited_time"], "read_at": read_at.isoformat()}
            yield item

    def listing(self) -> Iterator[tuple[str, str]]:
        for page in self._search():
            if not (page.get("in_trash") or page.get("archived")):
                yield page["id"], page["last_edited_time"]

    def fetch(self, keys: list[str]) -> Iterator[Item]:
        for key in keys:
            try:
                page = self._api(self.client.pages.retrieve, page_id=key)
            except HTTPResponseError as exc:
                yield _missing(key, exc)
                continue
            if not self.options["databases"] and _is_row(page):
                yield Item(key=key, deleted=True)
                continue
            yield self._item(page)

    def permissions(self, keys: list[str]) -> Iterator[tuple[str, Permission | None]]:
        for key in keys:
            yield key, PUBLIC

    def groups(self) -> Iterator[SourceGroup]:
        return iter(())

    # -- one page --

    def _item(self, page: dict) -> Item:
        """The ``Item`` of ``page`` (a page object): its document, or ``deleted`` when it is in the
        trash or was unshared while being read, or ``error`` when Notion refused a part of it."""
        key, edited = page["id"], page["last_edited_time"]
        if page.get("in_trash") or page.get("archived"):
            return Item(key=key, fingerprint=edited, deleted=True)
        try:
            body = self._blocks_markdown(key, 0)
        except HTTPResponseError as exc:
            return _missing(key, exc)
        title = _page_title(page) or "Untitled"
        text = "\n\n".join(part for part in (f"# {title}", "\n".join(_properties_markdown(page)), body) if part)
        document = read_bytes(text.encode(), name=f"{key}.md", external_id=f"{KIND}/{key}", uri=page.get("url", ""))[0]
        document = ReadDocument(
            external_id=document.external_id,
            title=title,
            text=document.text,
            uri=page.get("url") or _notion_url(key),
            published_at=_when(edited),
            metadata={
                "author": self._author(page.get("created_by") or {}),
                "place": self._place(page.get("parent") or {}),
                "updated_at": _when(edited).isoformat(),
                "source_kind": KIND,
            },
            sections=document.sections,
        )
        return Item(key=key, fingerprint=edited, documents=[document], permission=PUBLIC)

    def _blocks_markdown(self, block_id: str, depth: int) -> str:
        """The blocks under ``block_id`` as Markdown, nested list items indented."""
        lines: list[str] = []
        number = 0
        for block in self._children(block_id):
            kind = block.get("type", "")
            number = number + 1 if kind == "numbered_list_item" else 0
            if kind == "table":
                lines += _table_markdown(list(self._children(block["id"])) if block.get("has_children") else [])
                continue
            line = _block_line(block, number)
            if line and kind not in _CONTAINER_KINDS:
                lines.append(line if kind in _LIST_KINDS else f"\n{line}\n")
            if block.get("has_children") and kind not in ("child_page", "child_database") and depth < MAX_DEPTH:
                indent = "  " if kind in _LIST_KINDS else ""
                inner = self._blocks_markdown(block["id"], depth + 1).split("\n")
                lines += [indent + text if text else text for text in inner] + [""]
        return "\n".join(lines).strip("\n")

    def _author(self, user: dict) -> str:
        """The name of ``user`` (a partial user object), looked up once; its id when unreadable."""
        user_id = user.get("id", "")
        if user.get("name"):
            return user["name"]
        if not user_id or not self._names_readable:
            return user_id
        if user_id not in self._names:
            try:
                self._names[user_id] = self._api(self.client.users.retrieve, user_id=user_id).get("name") or user_id
            except HTTPResponseError as exc:  # 403: no "Read user information" capability, ids from now on
                self._names_readable = exc.status != 403
                self._names[user_id] = user_id
        return self._names[user_id]

    def _place(self, parent: dict, hops: int = 0) -> str:
        """What a page sits in: its database's title, its parent page's title, or the workspace's
        name (also when the parent is not shared with the integration)."""
        kind = parent.get("type", "")
        object_id = parent.get("database_id") if kind == "data_source_id" else parent.get(kind)
        if kind not in ("database_id", "data_source_id", "page_id", "block_id") or not isinstance(object_id, str):
            return self._workspace_name()
        if object_id not in self._places:
            self._places[object_id] = self._place_of(kind, object_id, hops)
        return self._places[object_id]

    def _place_of(self, kind: str, object_id: str, hops: int) -> str:
        try:
            if kind in ("database_id", "data_source_id"):
                database = self._api(self.client.databases.retrieve, database_id=object_id)
                return _plain(database.get("title")) or "Untitled"
            if kind == "page_id":
                return _page_title(self._api(self.client.pages.retrieve, page_id=object_id)) or "Untitled"
            if hops < PLACE_HOPS:  # a page in a column, a toggle...: the page that block is on
                block = self._api(self.client.blocks.retrieve, block_id=object_id)
                return self._place(block.get("parent") or {}, hops + 1)
        except HTTPResponseError:
            pass
        return self._workspace_name()

    def _workspace_name(self) -> str:
        if self._workspace is None:
            me = self._api(self.client.users.me, whole=True)
            self._workspace = (me.get("bot") or {}).get("workspace_name") or "Notion"
        return self._workspace


def _is_row(page: dict) -> bool:
    return page.get("parent", {}).get("type") in ("data_source_id", "database_id")


def _missing(key: str, error: HTTPResponseError) -> Item:
    """The ``Item`` for a page Notion would not give: gone (404, no longer shared) or failed alone."""
    if error.status == 404:
        return Item(key=key, deleted=True)
    return Item(key=key, error=f"Notion answered HTTP {error.status}: {str(error)[:200]}")
