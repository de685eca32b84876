"""A Confluence stand-in (Cloud or Data Center), written from Atlassian's REST API v1 and v2
references: what the Confluence connector asks, with Confluence's shapes.

* Cloud REST API v2 (under ``/wiki``): ``spaces`` (``keys``, ``status``), ``spaces/{id}/pages``
  and ``/blogposts`` (``status``), ``spaces/{id}/permissions`` (principal ``user``/``group``, and
  the role ``anonymous`` for anonymous access); ``cursor`` pagination, at most 250 a page, the
  cursor in ``_links.next`` (``/wiki/api/v2/...?limit=&cursor=``);
* REST API v1 (both): ``content/search`` with the CQL the connector writes (``type``, ``space``,
  ``id`` with ``=`` or ``in``, ``lastmodified >= now("-Nm")``, joined by ``and``; anything else a
  400 as Confluence's parser gives), 250 results a page at most, 50 when bodies are expanded; the
  next page by ``cursor`` on Cloud, ``start`` on Data Center; the expansions ``version``,
  ``space``, ``container``, ``ancestors``, ``body.storage`` and
  ``restrictions.read.restrictions.user``/``group``; ``content/{id}/child/comment``,
  ``content/{id}/restriction/byOperation/read``, ``group``, ``group/member?groupId=``,
  ``user/bulk``, ``user/current``; Data Center also ``space`` and ``content?spaceKey=&type=``;
  ``start``/``limit``/``size`` with ``_links.next`` relative to ``_links.base``;
* ``download/attachments/{page}/{file}``: the attachment's bytes.

Credentials: Cloud takes ``Authorization: Basic`` of ``token`` (``email:api_token``), Data Center
``Authorization: Bearer``; a revoked one answers 401. Each change moves the clock one minute and
stamps the content's version with it; searches compare with the real time (``now(...)``), so the
clock's times lie in the past.

Build the world with ``user``, ``group``, ``space``, ``page`` (``kind="blogpost"`` for a blog
post), ``comment`` and ``attachment``; change it with ``edit``, ``delete`` and ``restrict``.
"""

from __future__ import annotations

import base64
import itertools
import re
from datetime import UTC, datetime, timedelta
from urllib.parse import quote, unquote, urlencode

from tests.connectors.standin import Request, StandIn, route

P = r"(?:/wiki)?"  # Cloud serves under /wiki, Data Center at the root


class CqlError(ValueError):
    pass


def _iso(when: datetime) -> str:
    return when.strftime("%Y-%m-%dT%H:%M:%S.") + f"{when.microsecond // 1000:03d}Z"


def _values(text: str) -> list[str]:
    text = text.strip()
    if text.startswith("("):
        if not text.endswith(")"):
            raise CqlError(f"unbalanced parentheses in {text!r}")
        text = text[1:-1]
    return [v.strip().strip('"') for v in text.split(",") if v.strip()]


class ConfluenceStandIn(StandIn):
    """A Confluence site on loopback (module docstring)."""

    def __init__(self, *, cloud: bool = True):
        super().__init__()
        self.cloud = cloud
        self.token = "bot@example.com:cloud-api-token" if cloud else "dc-personal-access-token"
        self.prefix = "/wiki" if cloud else ""
        self.clock = datetime(2024, 3, 1, 9, 0, tzinfo=UTC)
        self.users: dict[str, dict] = {}
        self.groups: dict[str, dict] = {}
        self.spaces: dict[str, dict] = {}
        self.contents: dict[str, dict] = {}  # id -> content, in creation order
        self.unreadable: set[str] = set()  # content ids whose restrictions answer 403
        self.expands_restrictions = True  # False: searches leave restrictions out (asked page by page)
        self.searches: list[tuple[str, str]] = []  # (cql, expand) of every content search
        self._ids = itertools.count(1001)
        self.user("bot", "Sync Bot", "bot@example.com")

    @property
    def site(self) -> str:
        """The location a source gives: ``http://127.0.0.1:PORT/wiki`` (Cloud) or the root."""
        return self.url.rstrip("/") + self.prefix

    # -- building the world --------------------------------------------------------------------

    def user(self, account_id: str, name: str, email: str | None) -> None:
        """A user; ``email=None``: one whose address Confluence hides (profile visibility)."""
        self.users[account_id] = {"accountId": account_id, "name": name, "email": email}

    def group(self, group_id: str, name: str, members=()) -> None:
        self.groups[group_id] = {"id": group_id, "name": name, "members": list(members)}

    def space(self, key: str, name: str, *, users=(), groups=(), anonymous: bool = False) -> None:
        """A space readable by ``users`` (account ids), ``groups`` (group ids) and, with
        ``anonymous``, anyone."""
        number, readers = str(90000 + len(self.spaces)), dict(users=set(users), groups=set(groups), anonymous=anonymous)
        self.spaces[key] = dict(id=number, key=key, name=name, **readers)

    def _tick(self) -> datetime:
        self.clock += timedelta(minutes=1)
        return self.clock

    def _add(self, **content) -> str:
        content_id = str(next(self._ids))
        fresh = dict(id=content_id, version=1, when=self._tick(), restricted=None, parent=None, container=None, body="")
        self.contents[content_id] = fresh | content
        return content_id

    def page(
        self, space: str, title: str, body: str, *, parent: str | None = None, by: str = "bot", kind: str = "page"
    ) -> str:
        return self._add(type=kind, space=space, title=title, body=body, parent=parent, by=by)

    def comment(self, page_id: str, body: str, *, by: str = "bot", location: str = "footer") -> str:
        page = self.contents[page_id]
        where = dict(space=page["space"], container=page_id, location=location)
        return self._add(type="comment", title=f"Re: {page['title']}", body=body, by=by, **where)

    def attachment(self, page_id: str, filename: str, data: bytes, media_type: str, *, by: str = "bot") -> str:
        page = self.contents[page_id]
        where = dict(space=page["space"], container=page_id)
        return self._add(type="attachment", title=filename, data=data, by=by, media_type=media_type, **where)

    def edit(self, content_id: str, body: str | None = None, *, title: str | None = None, by: str = "bot") -> None:
        """A new version of a content: its body, title or (for an attachment) nothing new."""
        content = self.contents[content_id]
        content.update(version=content["version"] + 1, when=self._tick(), by=by)
        if body is not None:
            content["data" if content["type"] == "attachment" else "body"] = body
        if title is not None:
            content["title"] = title

    def delete(self, content_id: str) -> None:
        """Trash a content and what it holds (comments, attachments, child pages move up: gone here)."""
        for other in [c for c in self.contents.values() if c["container"] == content_id]:
            del self.contents[other["id"]]
        del self.contents[content_id]

    def restrict(self, content_id: str, *, users=(), groups=()) -> None:
        """Set a content's read restriction (nothing: none)."""
        self.contents[content_id]["restricted"] = (list(users), list(groups)) if users or groups else None

    # -- credentials ---------------------------------------------------------------------------

    def authorized(self, request: Request) -> bool:
        header = request.headers.get("Authorization", "")
        if self.cloud:
            return header == "Basic " + base64.b64encode(self.token.encode()).decode()
        return header == f"Bearer {self.token}"

    def unauthorized(self, request: Request):
        return 401, {"statusCode": 401, "message": "Client must be authenticated to access this resource."}

    def not_found(self, request: Request):
        return 404, {"statusCode": 404, "message": "No content found", "reason": "Not Found"}

    # -- shapes --------------------------------------------------------------------------------

    def _user(self, account_id: str) -> dict:
        user = self.users.get(account_id) or {"accountId": account_id, "name": account_id, "email": None}
        if not self.cloud:
            return dict(type="known", username=account_id, userKey=f"key-{account_id}", displayName=user["name"])
        names = dict(publicName=user["name"], displayName=user["name"])
        return dict(type="known", accountId=account_id, accountType="atlassian", email=user["email"] or "", **names)

    def _space_of(self, content: dict) -> dict:
        return self.spaces[content["space"]]

    def _space(self, space: dict, **more) -> dict:
        """A space as v1 (Data Center) or v2 (Cloud) lists it."""
        webui = f"/spaces/{space['key']}" if self.cloud else f"/display/{space['key']}"
        return dict(id=space["id"], key=space["key"], name=space["name"], type="global", _links={"webui": webui}) | more

    def _webui(self, content: dict) -> str:
        key, number, title = content["space"], content["id"], quote(content["title"].replace(" ", "+"), safe="+")
        if content["type"] == "attachment":
            return f"/pages/viewpageattachments.action?pageId={content['container']}&preview=/{number}"
        if content["type"] == "comment":
            return f"{self._webui(self.contents[content['container']])}?focusedCommentId={number}"
        if not self.cloud:
            return f"/pages/viewpage.action?pageId={number}"
        if content["type"] == "blogpost":
            return f"/spaces/{key}/blog/{content['when']:%Y/%m/%d}/{number}/{title}"
        return f"/spaces/{key}/pages/{number}/{title}"

    def _ancestors(self, content: dict) -> list[dict]:
        chain, parent = [], content.get("parent")
        while parent and parent in self.contents:
            chain.insert(0, self.contents[parent])
            parent = self.contents[parent].get("parent")
        return chain

    def _restriction(self, content: dict, expand: set[str], prefix: str) -> dict:
        """A content's read restriction (``ContentRestriction``), its users and groups as asked."""
        users, groups = content["restricted"] or ([], [])
        sets = {"user": [self._user(u) for u in users]}
        sets["group"] = [{"type": "group", "name": self.groups[g]["name"], "id": g} for g in groups]
        restrictions = {
            name: {"results": rows, "start": 0, "limit": 200, "size": len(rows)}
            for name, rows in sets.items()
            if f"{prefix}{name}" in expand
        }
        return {"operation": "read", "restrictions": restrictions, "_expandable": {"content": ""}}

    def _v1(self, content: dict, expand: set[str]) -> dict:
        """A content in REST API v1's shape, with the expansions asked (a content in
        ``unreadable`` never has its restrictions expanded)."""
        number, kind, when = content["id"], content["type"], content["when"]
        links = {"webui": self._webui(content), "self": f"{self.site}/rest/api/content/{number}"}
        row = {"id": number, "type": kind, "status": "current", "title": content["title"], "_links": links}
        row["_expandable"] = {e: "" for e in ("version", "space", "container", "ancestors", "body", "restrictions")}
        if "version" in expand:
            by = self._user(content["by"])
            row["version"] = {"number": content["version"], "when": _iso(when), "by": by, "minorEdit": False}
        if "space" in expand:
            space = self._space_of(content)
            row["space"] = {"id": int(space["id"]), "key": space["key"], "name": space["name"], "type": "global"}
        if "container" in expand and content["container"]:
            row["container"] = self._reference(self.contents[content["container"]])
        if "ancestors" in expand:
            row["ancestors"] = [self._reference(a) for a in self._ancestors(content)]
        if "body.storage" in expand and kind != "attachment":
            row["body"] = {"storage": {"value": content["body"], "representation": "storage"}}
        if (
            any(e.startswith("restrictions.read.") for e in expand)
            and self.expands_restrictions
            and number not in self.unreadable
        ):
            row["restrictions"] = {"read": self._restriction(content, expand, "restrictions.read.restrictions.")}
        for name in ("version", "space", "container", "ancestors", "body", "restrictions"):
            if name in row:
                row["_expandable"].pop(name)
        if kind == "comment":
            row["extensions"] = {"location": content["location"]}
        if kind == "attachment":
            row["extensions"] = {"mediaType": content["media_type"], "fileSize": len(content["data"]), "comment": ""}
            query = urlencode({"version": content["version"], "modificationDate": int(when.timestamp() * 1000)})
            links["download"] = f"/download/attachments/{content['container']}/{quote(content['title'])}?{query}&api=v2"
        return row

    @staticmethod
    def _reference(content: dict) -> dict:
        return {"id": content["id"], "type": content["type"], "title": content["title"]}

    def _v2(self, content: dict) -> dict:
        """A page or blog post in REST API v2's shape."""
        parent, when, by = content.get("parent"), _iso(content["when"]), content["by"]
        version = {"number": content["version"], "createdAt": when, "message": "", "minorEdit": False, "authorId": by}
        links = {"webui": self._webui(content), "tinyui": f"/x/{content['id']}"}
        row = {"id": content["id"], "status": "current", "title": content["title"], "authorId": by, "createdAt": when}
        row |= {"spaceId": self._space_of(content)["id"], "parentId": parent, "parentType": "page" if parent else None}
        return row | {"version": version, "_links": links}

    # -- pagination ----------------------------------------------------------------------------

    @staticmethod
    def _cursor(offset: int) -> str:
        return base64.urlsafe_b64encode(f"offset:{offset}".encode()).decode()

    @staticmethod
    def _offset(cursor: str) -> int:
        return int(base64.urlsafe_b64decode(cursor.encode()).decode().split(":")[1])

    def _v2_page(self, request: Request, rows: list, build) -> tuple:
        limit = max(1, min(int(request.arg("limit", 25)), 250))
        start = self._offset(request.arg("cursor")) if request.arg("cursor") else 0
        links = {"base": self.site}
        if start + limit < len(rows):
            links["next"] = f"{request.path}?{urlencode({'limit': limit, 'cursor': self._cursor(start + limit)})}"
        return 200, {"results": [build(row) for row in rows[start : start + limit]], "_links": links}

    def _v1_page(self, request: Request, rows: list, build, *, most: int, cursor: bool = False) -> tuple:
        limit = max(1, min(int(request.arg("limit", 25)), most))
        start = (
            self._offset(request.arg("cursor")) if cursor and request.arg("cursor") else int(request.arg("start", 0))
        )
        page = [build(row) for row in rows[start : start + limit]]
        path = request.path[len(self.prefix) :]
        links = {"base": self.site, "context": self.prefix, "self": f"{self.site}{path}"}
        if start + limit < len(rows):
            query = [
                (k, v) for k, values in request.query.items() if k not in ("start", "cursor", "limit") for v in values
            ]
            query += [("limit", limit), ("cursor", self._cursor(start + limit)) if cursor else ("start", start + limit)]
            links["next"] = f"{path}?{urlencode(query)}"
        return 200, {"results": page, "start": start, "limit": limit, "size": len(page), "_links": links}

    # -- CQL -----------------------------------------------------------------------------------

    def _cql(self, cql: str):
        """A predicate on contents for ``cql`` (module docstring); ``CqlError`` for the rest."""
        tests = []
        for clause in re.split(r"\s+and\s+", cql.strip(), flags=re.I):
            match = re.fullmatch(r"(type|space|id)\s*(=|in)\s*(.+)", clause.strip(), flags=re.I)
            since = re.fullmatch(r'lastmodified\s*>=\s*now\("-(\d+)m"\)', clause.strip(), flags=re.I)
            if match:
                field, values = match.group(1).lower(), set(_values(match.group(3)))
                if field == "type":
                    tests.append(lambda c, v=values: c["type"] in v)
                elif field == "space":
                    tests.append(lambda c, v=values: c["space"] in v)
                else:
                    tests.append(lambda c, v=values: c["id"] in v)
            elif since:
                cutoff = datetime.now(UTC) - timedelta(minutes=int(since.group(1)))
                tests.append(lambda c, t=cutoff: c["when"] >= t)
            else:
                raise CqlError(f"Could not parse cql : {cql}")
        return lambda content: all(test(content) for test in tests)

    # -- routes: REST API v1 -------------------------------------------------------------------

    def reset_counts(self) -> None:
        super().reset_counts()
        self.searches.clear()

    @route("GET", P + r"/rest/api/content/search")
    def content_search(self, request: Request):
        self.searches.append((request.arg("cql", ""), request.arg("expand", "")))
        try:
            matches = self._cql(request.arg("cql", ""))
        except CqlError as exc:
            return 400, {
                "statusCode": 400,
                "message": f"com.atlassian.confluence.api.service.exceptions.BadRequestException: {exc}",
            }
        expand = set((request.arg("expand") or "").split(","))
        rows = [c for c in self.contents.values() if matches(c)]
        most = 50 if "body.storage" in expand else 250
        return self._v1_page(request, rows, lambda c: self._v1(c, expand), most=most, cursor=self.cloud)

    @route("GET", P + r"/rest/api/content/(\d+)/child/comment")
    def child_comments(self, request: Request, content_id: str):
        if content_id not in self.contents:
            return self.not_found(request)
        expand = set((request.arg("expand") or "").split(","))
        rows = [c for c in self.contents.values() if c["type"] == "comment" and c["container"] == content_id]
        return self._v1_page(request, rows, lambda c: self._v1(c, expand), most=100)

    @route("GET", P + r"/rest/api/content/(\d+)/restriction/byOperation/read")
    def read_restriction(self, request: Request, content_id: str):
        if content_id not in self.contents:
            return self.not_found(request)
        if content_id in self.unreadable:
            return 403, {"statusCode": 403, "message": "Not permitted to view restrictions"}
        expand = set((request.arg("expand") or "").split(","))
        answer = self._restriction(self.contents[content_id], expand, "restrictions.")
        return 200, answer | {"_links": {"base": self.site, "context": self.prefix}}

    @route("GET", P + r"/rest/api/group")
    def group_list(self, request: Request):
        rows = [{"type": "group", "name": g["name"], "id": g["id"]} for g in self.groups.values()]
        return self._v1_page(request, rows, lambda g: g, most=200)

    @route("GET", P + r"/rest/api/group/member")
    def group_members(self, request: Request):
        group = self.groups.get(request.arg("groupId", ""))
        if group is None:
            return self.not_found(request)
        return self._v1_page(request, group["members"], self._user, most=200)

    @route("GET", P + r"/rest/api/user/bulk")
    def user_bulk(self, request: Request):
        accounts = [a for a in request.query.get("accountId", []) if a in self.users]
        return 200, {
            "results": [self._user(a) for a in accounts[:200]],
            "start": 0,
            "limit": 200,
            "size": len(accounts),
        }

    @route("GET", P + r"/rest/api/user/current")
    def user_current(self, request: Request):
        return 200, self._user("bot")

    @route("GET", r"/rest/api/space")
    def server_spaces(self, request: Request):
        keys = request.query.get("spaceKey")
        rows = [s for s in self.spaces.values() if not keys or s["key"] in keys]
        return self._v1_page(request, rows, lambda s: self._space(s, id=int(s["id"])), most=500)

    @route("GET", r"/rest/api/content")
    def server_contents(self, request: Request):
        kind, key = request.arg("type", "page"), request.arg("spaceKey")
        expand = set((request.arg("expand") or "").split(","))
        rows = [c for c in self.contents.values() if c["type"] == kind and (not key or c["space"] == key)]
        return self._v1_page(request, rows, lambda c: self._v1(c, expand), most=200)

    @route("GET", P + r"/download/attachments/(\d+)/([^/]+)")
    def download(self, request: Request, page_id: str, filename: str):
        for content in self.contents.values():
            if (content["type"], content["container"], content["title"]) == ("attachment", page_id, unquote(filename)):
                return 200, content["data"], {"Content-Type": content["media_type"]}
        return self.not_found(request)

    # -- routes: Cloud REST API v2 -------------------------------------------------------------

    @route("GET", r"/wiki/api/v2/spaces")
    def spaces_v2(self, request: Request):
        keys = set((request.arg("keys") or "").split(",")) - {""}
        rows = [s for s in self.spaces.values() if not keys or s["key"] in keys]
        return self._v2_page(request, rows, lambda s: self._space(s, status="current"))

    @route("GET", r"/wiki/api/v2/spaces/(\d+)/(pages|blogposts)")
    def space_contents_v2(self, request: Request, space_id: str, kind: str):
        space = next((s for s in self.spaces.values() if s["id"] == space_id), None)
        if space is None:
            return self.not_found(request)
        wanted = "page" if kind == "pages" else "blogpost"
        rows = [c for c in self.contents.values() if c["type"] == wanted and c["space"] == space["key"]]
        return self._v2_page(request, rows, self._v2)

    @route("GET", r"/wiki/api/v2/spaces/(\d+)/permissions")
    def space_permissions_v2(self, request: Request, space_id: str):
        space = next((s for s in self.spaces.values() if s["id"] == space_id), None)
        if space is None:
            return self.not_found(request)
        principals = [("user", u) for u in sorted(space["users"])] + [("group", g) for g in sorted(space["groups"])]
        principals += [("role", "anonymous")] if space["anonymous"] else []
        rows = []
        for kind, principal in principals:
            for operation, target in (("read", "space"), ("create", "page"), ("create", "comment")):
                if kind == "role" and operation != "read":
                    continue
                what = {"key": operation, "targetType": target}
                rows.append({"id": str(len(rows) + 1), "principal": {"type": kind, "id": principal}, "operation": what})
        return self._v2_page(request, rows, lambda row: row)
