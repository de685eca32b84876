"""A local stand-in for Notion's API (version 2025-09-03), written from Notion's API reference
(https://developers.notion.com/reference), for the real ``notion_client`` client.

What it answers, as Notion does: JSON objects (``"object": "list"`` with ``results``,
``next_cursor`` and ``has_more`` for lists; ``start_cursor`` is the id of the first result of
the next page, ``page_size`` at most 100); errors as ``{"object": "error", "status", "code",
"message"}``: ``unauthorized`` (401) for a wrong or ``revoke()``d token, ``missing_version``
(400) without a ``Notion-Version`` header, ``object_not_found`` (404) for what is not shared
with the integration, ``restricted_resource`` (403) for users without the "Read user
information" capability (``user_info = False``) or searches without "Read content"
(``read_content = False``), and ``fail_next``'s answers in Notion's shape
(``rate_limited`` 429 with ``Retry-After``, ``internal_server_error``...).

Endpoints: ``POST /v1/search`` (pages only, by ``last_edited_time``; pages in the trash are left
out), ``GET /v1/pages/{id}``, ``GET /v1/blocks/{id}``, ``GET /v1/blocks/{id}/children``,
``GET /v1/databases/{id}``, ``GET /v1/users/me`` and ``GET /v1/users/{id}``.

Time is a clock the test moves (``tick``); ``last_edited_time`` is rounded down to the minute,
as Notion's is. State: ``add_user``, ``add_page`` (in the workspace, under a page, or as a row of
a database), ``add_database``, ``edit``, ``trash``, ``unshare``; blocks are built with
``paragraph``, ``heading``, ``bullet``, ``numbered``, ``todo``, ``code``, ``table`` and
``column_list``.
"""

from __future__ import annotations

import copy
import uuid
from datetime import UTC, datetime, timedelta

from tests.connectors.standin import Request, StandIn, route

VERSION = "2025-09-03"
START = datetime(2025, 1, 6, 9, 0, tzinfo=UTC)
ERRORS = {
    429: ("rate_limited", "You have been rate limited. Please try again in a few minutes."),
    500: ("internal_server_error", "Unexpected error occurred."),
    502: ("internal_server_error", "Bad gateway."),
    503: ("service_unavailable", "Notion is unavailable, please try again later."),
    504: ("gateway_timeout", "The request timed out."),
}


def _rich(text: str) -> list[dict]:
    if not text:
        return []
    return [
        {
            "type": "text",
            "text": {"content": text, "link": None},
            "annotations": {"bold": False, "italic": False, "code": False, "color": "default"},
            "plain_text": text,
            "href": None,
        }
    ]


def _error(status: int, code: str, message: str):
    return status, {"object": "error", "status": status, "code": code, "message": message, "request_id": "req-1"}


def _block(kind: str, data: dict, children=()) -> dict:
    """A block before it is placed: its kind's object and its children (more such blocks)."""
    return {"type": kind, kind: data, "children": list(children)}


def paragraph(text: str, children=()) -> dict:
    return _block("paragraph", {"rich_text": _rich(text), "color": "default"}, children)


def heading(level: int, text: str) -> dict:
    return _block(f"heading_{level}", {"rich_text": _rich(text), "is_toggleable": False, "color": "default"})


def bullet(text: str, children=()) -> dict:
    return _block("bulleted_list_item", {"rich_text": _rich(text), "color": "default"}, children)


def numbered(text: str, children=()) -> dict:
    return _block("numbered_list_item", {"rich_text": _rich(text), "color": "default"}, children)


def todo(text: str, checked: bool = False) -> dict:
    return _block("to_do", {"rich_text": _rich(text), "checked": checked, "color": "default"})


def code(text: str, language: str = "python") -> dict:
    return _block("code", {"rich_text": _rich(text), "language": language, "caption": []})


def table(rows: list[list[str]]) -> dict:
    cells = [_block("table_row", {"cells": [_rich(cell) for cell in row]}) for row in rows]
    width = max(len(row) for row in rows)
    return _block("table", {"table_width": width, "has_column_header": True, "has_row_header": False}, cells)


def column_list(*columns: list[dict]) -> dict:
    return _block("column_list", {}, [_block("column", {}, column) for column in columns])


class NotionStandIn(StandIn):
    token = "ntn_standin_token"
    workspace = "Acme"

    def __init__(self):
        super().__init__()
        self.now = START
        self.user_info = True
        self.read_content = True  # the integration's "Read content" capability
        self.bot_id = str(uuid.uuid4())
        self.users: dict[str, dict] = {}
        self.pages: dict[str, dict] = {}  # page objects by id, in creation order
        self.databases: dict[str, dict] = {}
        self.blocks: dict[str, dict] = {}  # every block by id (pages' child_page blocks too)
        self.children: dict[str, list[str]] = {}  # a page's or block's children, in order
        self.unshared: set[str] = set()

    # -- what tests change -------------------------------------------------------------------------

    def tick(self, minutes: float = 1) -> None:
        self.now += timedelta(minutes=minutes)

    def stamp(self) -> str:
        """The clock as ``last_edited_time`` says it: rounded down to the minute."""
        return self.now.replace(second=0, microsecond=0).strftime("%Y-%m-%dT%H:%M:00.000Z")

    def add_user(self, name: str, email: str) -> str:
        user_id = str(uuid.uuid4())
        self.users[user_id] = {
            "object": "user",
            "id": user_id,
            "type": "person",
            "name": name,
            "avatar_url": None,
            "person": {"email": email},
        }
        return user_id

    def add_database(self, title: str, *, parent: str | None = None) -> str:
        """A database (with one data source) in the workspace or under page ``parent``."""
        database_id, source_id = str(uuid.uuid4()), str(uuid.uuid4())
        self.databases[database_id] = {
            "object": "database",
            "id": database_id,
            "title": _rich(title),
            "description": [],
            "parent": {"type": "page_id", "page_id": parent} if parent else {"type": "workspace", "workspace": True},
            "is_inline": False,
            "in_trash": False,
            "created_time": self.stamp(),
            "last_edited_time": self.stamp(),
            "data_sources": [{"id": source_id, "name": title}],
            "url": f"https://www.notion.so/{database_id.replace('-', '')}",
        }
        if parent:
            self._place(parent, {"type": "child_database", "child_database": {"title": title}}, database_id)
        return database_id

    def add_page(
        self,
        title: str,
        blocks=(),
        *,
        author: str | None = None,
        parent: str | None = None,
        database: str | None = None,
        properties: dict | None = None,
    ) -> str:
        """A page in the workspace, under page (or block) ``parent``, or a row of ``database`` with
        ``properties`` (property objects by name, besides the title "Name")."""
        page_id = str(uuid.uuid4())
        author = author or next(iter(self.users), self.bot_id)
        if database:
            source_id = self.databases[database]["data_sources"][0]["id"]
            where = {"type": "data_source_id", "data_source_id": source_id, "database_id": database}
            props = {"Name": {"id": "title", "type": "title", "title": _rich(title)}, **(properties or {})}
        else:
            kind = "page_id" if parent in self.pages else "block_id"
            where = {"type": kind, kind: parent} if parent else {"type": "workspace", "workspace": True}
            props = {"title": {"id": "title", "type": "title", "title": _rich(title)}}
        self.pages[page_id] = {
            "object": "page",
            "id": page_id,
            "created_time": self.stamp(),
            "last_edited_time": self.stamp(),
            "created_by": {"object": "user", "id": author},
            "last_edited_by": {"object": "user", "id": author},
            "cover": None,
            "icon": None,
            "parent": where,
            "archived": False,
            "in_trash": False,
            "is_locked": False,
            "properties": props,
            "url": f"https://www.notion.so/{title.replace(' ', '-')}-{page_id.replace('-', '')}",
            "public_url": None,
        }
        self.children[page_id] = [self._add_block(page_id, block) for block in blocks]
        if parent:
            self._place(parent, {"type": "child_page", "child_page": {"title": title}}, page_id)
        return page_id

    def edit(self, page_id: str, blocks=None, *, title: str | None = None, properties: dict | None = None) -> None:
        """Replace a page's blocks, title or properties; its ``last_edited_time`` becomes now."""
        page = self.pages[page_id]
        if blocks is not None:
            self.children[page_id] = [self._add_block(page_id, block) for block in blocks]
        if title is not None:
            next(p for p in page["properties"].values() if p["type"] == "title")["title"] = _rich(title)
        page["properties"].update(properties or {})
        page["last_edited_time"] = self.stamp()

    def trash(self, page_id: str) -> None:
        self.pages[page_id].update(in_trash=True, archived=True, last_edited_time=self.stamp())

    def unshare(self, page_id: str) -> None:
        """The page is no longer shared with the integration: search leaves it out, reads are 404."""
        self.unshared.add(page_id)

    # -- blocks ------------------------------------------------------------------------------------

    def _add_block(self, parent: str, block: dict) -> str:
        block_id = str(uuid.uuid4())
        kind = block["type"]
        where = "page_id" if parent in self.pages else "block_id"
        stored = {
            "object": "block",
            "id": block_id,
            "parent": {"type": where, where: parent},
            "created_time": self.stamp(),
            "last_edited_time": self.stamp(),
            "has_children": bool(block["children"]),
            "archived": False,
            "in_trash": False,
            "type": kind,
            kind: copy.deepcopy(block[kind]),
        }
        self.blocks[block_id] = stored
        self.children[block_id] = [self._add_block(block_id, child) for child in block["children"]]
        return block_id

    def _place(self, parent: str, block: dict, object_id: str) -> None:
        """A child_page or child_database block (whose id is the page's or database's) at the end of ``parent``."""
        kind = block["type"]
        where = "page_id" if parent in self.pages else "block_id"
        stored = {
            "object": "block",
            "id": object_id,
            "parent": {"type": where, where: parent},
            "created_time": self.stamp(),
            "last_edited_time": self.stamp(),
            "has_children": False,
            "archived": False,
            "in_trash": False,
            "type": kind,
            kind: block[kind],
        }
        self.children.setdefault(parent, []).append(object_id)
        self.blocks.setdefault(object_id, stored)
        if parent not in self.pages:
            self.blocks[parent]["has_children"] = True

    def block_ids(self, parent: str, kind: str) -> list[str]:
        """The ids of the blocks of ``kind`` under ``parent`` (a page or block), at any depth."""
        found = []
        for child in self.children.get(parent, []):
            if self.blocks[child]["type"] == kind:
                found.append(child)
            if child not in self.pages and child not in self.databases:
                found += self.block_ids(child, kind)
        return found

    # -- the API -----------------------------------------------------------------------------------

    def authorized(self, request: Request) -> bool:
        return super().authorized(request) and bool(request.headers.get("Notion-Version"))

    def unauthorized(self, request: Request):
        if not request.headers.get("Notion-Version"):
            return _error(400, "missing_version", "Notion-Version header failed validation.")
        return _error(401, "unauthorized", "API token is invalid.")

    def not_found(self, request: Request):
        return _error(400, "invalid_request_url", "Invalid request URL.")

    @staticmethod
    def _send(handler, status: int, body, headers: dict) -> None:
        if body == {"error": "stand-in failure"}:  # the base's fail_next, in Notion's words
            code, message = ERRORS.get(status, ("internal_server_error", "Unexpected error occurred."))
            body = _error(status, code, message)[1]
        StandIn._send(handler, status, body, headers)

    def _page_size(self, request: Request) -> int | None:
        size = int(request.arg("page_size") or 100)
        return size if 1 <= size <= 100 else None

    def _listed(self, items: list[dict], request: Request, kind: str):
        """One page of ``items`` as a Notion list, from ``start_cursor``."""
        size = self._page_size(request)
        if size is None:
            return _error(400, "validation_error", "body.page_size should be ≤ `100`.")
        start = 0
        cursor = request.arg("start_cursor")
        if cursor:
            ids = [item["id"] for item in items]
            if cursor not in ids:
                return _error(400, "validation_error", "The start_cursor provided is invalid.")
            start = ids.index(cursor)
        page = items[start : start + size]
        more = start + size < len(items)
        return 200, {
            "object": "list",
            "results": copy.deepcopy(page),
            "next_cursor": items[start + size]["id"] if more else None,
            "has_more": more,
            "type": kind,
            kind: {},
        }

    def _shared_page(self, page_id: str) -> dict | None:
        return None if page_id in self.unshared else self.pages.get(page_id)

    @route("POST", "/v1/search")
    def search(self, request: Request):
        if not self.read_content:
            return _error(403, "restricted_resource", "Integration does not have the capability to read content.")
        body = request.form()
        wanted = (body.get("filter") or {}).get("value")
        if wanted not in (None, "page", "data_source"):
            return _error(400, "validation_error", 'body.filter.value should be `"page"` or `"data_source"`.')
        sort = body.get("sort") or {}
        if sort and sort.get("timestamp") != "last_edited_time":
            return _error(400, "validation_error", 'body.sort.timestamp should be `"last_edited_time"`.')
        pages = [p for p in self.pages.values() if p["id"] not in self.unshared and not p["in_trash"]]
        pages = [] if wanted == "data_source" else pages
        order = list(reversed(pages))  # newest created first among equal times
        order.sort(key=lambda p: p["last_edited_time"], reverse=sort.get("direction") != "ascending")
        return self._listed(order, request, "page_or_data_source")

    @route("GET", "/v1/pages/([0-9a-f-]+)")
    def page(self, request: Request, page_id: str):
        page = self._shared_page(page_id)
        if page is None:
            return _error(
                404,
                "object_not_found",
                f"Could not find page with ID: {page_id}. Make sure the relevant "
                "pages and databases are shared with your integration.",
            )
        return 200, page

    def _readable_block(self, block_id: str) -> bool:
        if block_id in self.pages:
            return self._shared_page(block_id) is not None
        return block_id in self.blocks

    @route("GET", "/v1/blocks/([0-9a-f-]+)")
    def block(self, request: Request, block_id: str):
        if block_id not in self.blocks or not self._readable_block(block_id):
            return _error(404, "object_not_found", f"Could not find block with ID: {block_id}.")
        return 200, self.blocks[block_id]

    @route("GET", "/v1/blocks/([0-9a-f-]+)/children")
    def block_children(self, request: Request, block_id: str):
        if not self._readable_block(block_id):
            return _error(404, "object_not_found", f"Could not find block with ID: {block_id}.")
        blocks = [self.blocks[child] for child in self.children.get(block_id, [])]
        return self._listed(blocks, request, "block")

    @route("GET", "/v1/databases/([0-9a-f-]+)")
    def database(self, request: Request, database_id: str):
        if database_id not in self.databases or database_id in self.unshared:
            return _error(404, "object_not_found", f"Could not find database with ID: {database_id}.")
        return 200, self.databases[database_id]

    @route("GET", "/v1/users/me")
    def me(self, request: Request):
        return 200, {
            "object": "user",
            "id": self.bot_id,
            "type": "bot",
            "name": "Knowledge base",
            "avatar_url": None,
            "bot": {"owner": {"type": "workspace", "workspace": True}, "workspace_name": self.workspace},
        }

    @route("GET", "/v1/users/([0-9a-f-]+)")
    def user(self, request: Request, user_id: str):
        if not self.user_info:
            return _error(403, "restricted_resource", "Insufficient permissions for this endpoint.")
        if user_id not in self.users:
            return _error(404, "object_not_found", f"Could not find user with ID: {user_id}.")
        return 200, self.users[user_id]
