"""Confluence (Cloud and Data Center): the pages and blog posts of a site's spaces with their
footer comments, their attachments as documents of their own, and who may see each.

atlassian-python-api's ``Confluence`` client (its ``get``) through ``guarded_session``. Secret:
``email:api-token`` (basic auth; ``username:password`` on Data Center) or a bare personal access
token (bearer). Cloud lists spaces, pages, blog posts and space permissions with REST API v2;
CQL search, comments, restrictions and groups are REST API v1 on both deployments. Keys:
``page/<id>``, ``blogpost/<id>``, ``attachment/<id>``; fingerprint: the version number.

``changes``: one CQL search of what was modified since the checkpoint (ids and versions), then
the bodies of what changed (50 per ``id in (...)`` search), each changed page's comments and each
changed attachment's file. Permissions (Cloud): the space's readers narrowed by the read
restrictions of the page and of its ancestors, expanded in those searches (a page whose search
leaves them out is asked alone). Data Center's are not read: ``None`` (the tenant's admins only).
"""

from __future__ import annotations

import html
import re
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

from django.conf import settings
from django.utils import timezone
from django.utils.dateparse import parse_datetime
from requests import RequestException

from core.errors import InvalidInput, UnsupportedFileType
from core.outbound import FETCH_FAILED, AddressNotAllowed
from knowledge.connectors.base import PUBLIC, CredentialRejected, Item, Permission, SourceGroup, SourceUnreachable
from knowledge.connectors.http import guarded_session, status_raise
from knowledge.ingestion.documents import ReadDocument, locate_sections, normalize_text
from knowledge.ingestion.readers import SUPPORTED_EXTENSIONS, read_bytes

KIND = "confluence"
LISTING_LIMIT = 250  # results per listing request (the APIs' largest page)
BODY_BATCH = 50  # contents per CQL search that expands bodies or restrictions
# The change search starts this much before the checkpoint (clock skew, search index lag); what
# was seen already is dropped by its exact modification time.
CHANGES_MARGIN = timedelta(minutes=10)
CONTENT_TYPES = ("page", "blogpost")
RESTRICTIONS = "restrictions.read.restrictions.user,restrictions.read.restrictions.group"
BODY_EXPAND = f"body.storage,version,space,container,ancestors,{RESTRICTIONS}"
PLACE_EXPAND = f"space,container,ancestors,{RESTRICTIONS}"
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_CDATA = re.compile(r"<!\[CDATA\[(.*?)\]\]>", re.S)
_PARAGRAPHS = ["p", "pre", "blockquote", "table", "ul", "ol", "h1", "h2", "h3", "h4", "h5", "h6", "ac:structured-macro"]
_BLOCKS = ["div", "li", "tr", *_PARAGRAPHS]


class _Unreadable(Exception):
    """A resource answered 403 or 404 where that means "not readable", not a broken source."""


def _when(row: dict) -> datetime:
    """A v1 content's last modification (its version's ``when``), aware; the epoch if absent."""
    version = row.get("version") or {}
    parsed = parse_datetime(version.get("when") or version.get("createdAt") or "")
    return parsed if parsed and parsed.tzinfo else _EPOCH


def _chunks(values: list, size: int) -> Iterator[list]:
    return (values[start : start + size] for start in range(0, len(values), size))


def _body(row: dict) -> str:
    return ((row.get("body") or {}).get("storage") or {}).get("value") or ""


def _wanted_file(row: dict) -> bool:
    """Whether an attachment is read: a supported type, at most ``KB_MAX_UPLOAD_BYTES``."""
    size = (row.get("extensions") or {}).get("fileSize") or 0
    return Path(row.get("title") or "").suffix.lower() in SUPPORTED_EXTENSIONS and size <= settings.KB_MAX_UPLOAD_BYTES


def _footer(rows) -> list[dict]:  # the comments that are not inline (on a text selection), oldest first
    return sorted((r for r in rows if (r.get("extensions") or {}).get("location") != "inline"), key=_when)


def storage_text(value: str) -> tuple[str, list[str]]:
    """The text of a body in storage format (XHTML with ``ac:``/``ri:`` macros) and its headings.

    Blocks (paragraphs, list items, table rows, headings) become lines; macro parameters are
    dropped; code blocks' CDATA is kept as text. lxml parses in time linear in the body's length.
    """
    from bs4 import BeautifulSoup

    soup = BeautifulSoup(_CDATA.sub(lambda m: html.escape(m.group(1)), value or ""), "lxml")
    for tag in soup.find_all(["ac:parameter", "script", "style"]):
        tag.decompose()
    headings = [tag.get_text(" ", strip=True) for tag in soup.find_all(["h1", "h2", "h3", "h4"])]
    for tag in soup.find_all(["br", "td", "th", *_BLOCKS]):
        gap = "\n\n" if tag.name in _PARAGRAPHS else " " if tag.name in ("td", "th") else "\n"
        tag.insert(0, "- " if tag.name == "li" else gap if tag.name in _BLOCKS else "")
        tag.insert_after(gap)
    return normalize_text(soup.get_text()), [h for h in headings if h]


class ConfluenceConnector:
    """A Confluence site's spaces (module docstring). ``source.options``: ``spaces`` (keys; all
    the credential sees when empty), ``cloud`` (default: the host is an ``atlassian.net`` site),
    ``everyone_groups`` (groups that mean the whole organisation, default ``["confluence-users"]``)
    and ``attachments`` (default true)."""

    kind = KIND
    follows_permissions = True

    def __init__(self, source, secret: str):
        from atlassian import Confluence

        self.base = source.location.rstrip("/")
        options = source.options or {}
        host = urlsplit(self.base).hostname or ""
        self.cloud = bool(options.get("cloud", host.endswith((".atlassian.net", ".jira.com"))))
        spaces = options.get("spaces") or []
        self.space_keys = [str(key) for key in ([spaces] if isinstance(spaces, str) else spaces)]
        self.everyone = {str(name).lower() for name in options.get("everyone_groups", ["confluence-users"])}
        self.with_attachments = bool(options.get("attachments", True))
        user, colon, password = secret.partition(":")
        self.client = Confluence(
            url=self.base,
            session=guarded_session(),
            cloud=self.cloud,
            timeout=settings.KB_CONNECTOR_TIMEOUT_S,
            retry_with_header=False,  # the session's urllib3 Retry honours Retry-After
            **({"username": user, "password": password} if colon else {"token": secret}),
        )
        self._spaces: dict[str, dict] | None = None
        self._lineage: dict[str, tuple] = {}  # content id -> ("in", space key, ancestor ids) | ("on", container id)
        self._restrictions: dict[str, Permission | None] = {}  # content id -> its own read restriction
        self._space_readers: dict[str, Permission | None] = {}
        self._emails: dict[str, str] = {}  # Cloud account id -> e-mail ("" when hidden)
        self._members: dict[str, frozenset[str]] = {}
        self._group_names: dict[str, str] | None = None

    # -- HTTP ------------------------------------------------------------------------------------

    def _get(self, path: str, params: dict | None = None, *, what: str, missing_ok: bool = False, raw: bool = False):
        """The JSON (``raw``: the response) of GET ``path`` after retries. ``CredentialRejected``
        for 401/403, ``_Unreadable`` for 403/404 with ``missing_ok``, else ``SourceUnreachable``."""
        try:
            absolute = path.startswith(("http://", "https://"))
            response = self.client.get(path, params=params, absolute=absolute, advanced_mode=True)
        except AddressNotAllowed as exc:
            raise SourceUnreachable(f"Confluence at {self.base}: {exc} (KB_FETCH_ALLOWED_NETWORKS).") from exc
        except RequestException as exc:
            raise SourceUnreachable(f"Confluence at {self.base}: {FETCH_FAILED} ({what}).") from exc
        status = response.status_code
        if status >= 300:
            detail = response.text[:200] if "json" in response.headers.get("Content-Type", "") else ""
            status_raise(status, what=f"Confluence at {self.base} ({what})", detail=detail)
            if missing_ok and status in (403, 404):
                raise _Unreadable(status)
            if status == 403:
                raise CredentialRejected(
                    f"Confluence at {self.base} refused {what} (HTTP 403): the token lacks a scope or its user "
                    "cannot see it. Nothing was changed."
                )
            where = "https://<site>.atlassian.net/wiki" if self.cloud else "the server's base URL"
            raise SourceUnreachable(f"Confluence at {self.base} answered HTTP {status} for {what} (is it {where}?).")
        if raw:
            return response
        try:
            return response.json()
        except ValueError as exc:
            raise SourceUnreachable(f"Confluence at {self.base} did not answer JSON ({what}).") from exc

    def _paged(self, path: str, params: dict, *, what: str, missing_ok: bool = False) -> Iterator[dict]:
        """Every page's ``results``; ``_links.next``'s query (``start``, ``cursor``) is sent to ``path``."""
        seen: set[str] = set()
        query = dict(params)
        while True:
            data = self._get(path, query, what=what, missing_ok=missing_ok)
            yield from data.get("results") or []
            link = (data.get("_links") or {}).get("next")
            query = {**params, **parse_qs(urlsplit(link or "").query, keep_blank_values=True)}
            if not link or str(sorted(query.items())) in seen:
                return
            seen.add(str(sorted(query.items())))

    def _search(self, cql: str, *, expand: str, limit: int, what: str) -> Iterator[dict]:
        return self._paged("rest/api/content/search", {"cql": cql, "expand": expand, "limit": limit}, what=what)

    # -- spaces, check, listing ------------------------------------------------------------------

    def spaces(self) -> dict[str, dict]:
        """Key -> ``{"id", "key", "name"}`` of the spaces read; ``SourceUnreachable`` if one named is not seen."""
        if self._spaces is None:
            keys = self.space_keys
            if self.cloud:
                params = {"limit": LISTING_LIMIT, "status": "current", **({"keys": ",".join(keys)} if keys else {})}
                rows = self._paged("api/v2/spaces", params, what="the spaces")
            else:
                rows = self._paged("rest/api/space", {"limit": LISTING_LIMIT, "spaceKey": keys}, what="the spaces")
            self._spaces = {
                r["key"]: {"id": str(r["id"]), "key": r["key"], "name": r.get("name") or r["key"]} for r in rows
            }
            missing = sorted(set(keys) - set(self._spaces))
            if missing:
                raise SourceUnreachable(
                    f"Confluence at {self.base}: the space(s) {', '.join(missing)} do not exist or the credential "
                    "cannot see them. Nothing was changed; grant access or remove them from options['spaces']."
                )
        return self._spaces

    def _space_clause(self) -> str:
        keys = ", ".join('"' + k.replace("\\", "\\\\").replace('"', '\\"') + '"' for k in self.space_keys)
        return f" and space in ({keys})" if keys else ""

    def check(self) -> str:
        """E.g. "Confluence Cloud as Ada (ada@example.com): 3 spaces (ENG, HR, OPS)"."""
        me = self._get("rest/api/user/current", what="the credential's user")
        spaces = sorted(self.spaces())
        names = ", ".join(spaces[:20]) + (", ..." if len(spaces) > 20 else "")
        who = (me.get("displayName") or me.get("username") or "?") + (f" ({me['email']})" if me.get("email") else "")
        return (
            f"Confluence {'Cloud' if self.cloud else 'Data Center'} as {who}: {len(spaces)} spaces ({names or 'none'})"
        )

    def listing(self) -> Iterator[tuple[str, str]]:
        """``(key, version)`` of every page, blog post and readable attachment of the spaces."""
        for space in self.spaces().values():
            for kind in CONTENT_TYPES:
                what = f"the {kind}s of {space['key']}"
                if self.cloud:
                    path = f"api/v2/spaces/{space['id']}/{'pages' if kind == 'page' else 'blogposts'}"
                    rows = self._paged(path, {"limit": LISTING_LIMIT, "status": "current"}, what=what)
                else:
                    params = {"spaceKey": space["key"], "type": kind, "expand": "version", "limit": LISTING_LIMIT}
                    rows = self._paged("rest/api/content", params, what=what)
                for row in rows:
                    yield f"{kind}/{row['id']}", str((row.get("version") or {}).get("number", 0))
        if self.with_attachments:
            cql = f"type = attachment{self._space_clause()}"
            for row in self._search(cql, expand="version,container", limit=LISTING_LIMIT, what="the attachments"):
                if _wanted_file(row):
                    yield f"attachment/{row['id']}", str(row["version"]["number"])

    # -- content ---------------------------------------------------------------------------------

    def changes(self, checkpoint: dict) -> Iterator[Item]:
        """Items for what changed since ``checkpoint["since"]`` (everything when absent), oldest
        change first, each with ``{"since": <its last change, ISO>}``. The search's date is
        relative (``now("-Nm")``), so the credential's time zone does not matter."""
        since = parse_datetime(checkpoint["since"]) if checkpoint.get("since") else None
        self.spaces()
        cql = f"type in (page, blogpost, comment, attachment){self._space_clause()}"
        if since is not None:
            minutes = int((timezone.now() - since + CHANGES_MARGIN).total_seconds() // 60) + 1
            cql = f'lastmodified >= now("-{minutes}m") and {cql}'
        latest: dict[str, datetime] = {}
        for row in self._search(cql, expand="version,container", limit=LISTING_LIMIT, what="the changes"):
            when, key = _when(row), self._target(row)
            if key and (since is None or when > since):
                latest[key] = max(latest.get(key, when), when)
        comments = self._all_comments() if since is None else None
        for batch in _chunks(sorted(latest, key=latest.__getitem__), BODY_BATCH):
            for item in self._items(batch, comments):
                item.checkpoint = {"since": latest[item.key].isoformat()}
                yield item

    def _target(self, row: dict) -> str | None:
        """The key a changed content is read under: its own, or its page's for a comment."""
        kind, container = row.get("type"), row.get("container") or {}
        if kind in CONTENT_TYPES:
            return f"{kind}/{row['id']}"
        if kind == "comment" and container.get("type") in CONTENT_TYPES:
            return f"{container['type']}/{container['id']}"
        if kind == "attachment" and self.with_attachments and _wanted_file(row):
            return f"attachment/{row['id']}"
        return None

    def fetch(self, keys: list[str]) -> Iterator[Item]:
        """An item for each of ``keys``, read again (``deleted=True`` when gone)."""
        for batch in _chunks(list(keys), BODY_BATCH):
            yield from self._items(batch, None)

    def _items(self, keys: list[str], comments: dict | None) -> Iterator[Item]:
        """Items for ``keys`` (bodies in one search); ``comments`` by page id, None: read each page's."""
        ids = {key: key.partition("/")[2] for key in keys if key.partition("/")[2].isdigit()}
        rows: dict[str, dict] = {}
        if ids:
            cql = f"id in ({', '.join(ids.values())})"
            for row in self._search(cql, expand=BODY_EXPAND, limit=BODY_BATCH, what="the changed contents"):
                rows[str(row["id"])] = row
                self._remember(row)
        related = [str(a["id"]) for row in rows.values() for a in row.get("ancestors") or []]
        self._places(related + [str((row.get("container") or {}).get("id")) for row in rows.values()])
        for key in keys:
            row = rows.get(ids.get(key, ""))
            if row is None or row.get("type") != key.partition("/")[0]:
                yield Item(key, deleted=True)
            elif row["type"] == "attachment":
                yield self._attachment_item(key, row)
            else:
                page_comments = comments.get(row["id"], []) if comments is not None else self._comments(row["id"])
                document = self._page_document(key, row, page_comments)
                yield Item(key, str(row["version"]["number"]), [document], permission=self.permission_of(row["id"]))

    def _page_document(self, key: str, row: dict, comments: list[dict]) -> ReadDocument:
        """A page or blog post as a document: its title, body, then its footer comments."""
        body, headings = storage_text(_body(row))
        parts, when = [row["title"], body], _when(row)
        parts, headings = parts + ["Comments"] * bool(comments), headings + ["Comments"] * bool(comments)
        for comment in comments:
            by = ((comment.get("version") or {}).get("by") or {}).get("displayName") or "Someone"
            parts.append(f"{by} ({_when(comment).date().isoformat()}):\n{storage_text(_body(comment))[0]}")
            when = max(when, _when(comment))
        text = normalize_text("\n\n".join(p for p in parts if p))
        meta, sections = self._metadata(row, when), locate_sections(text, headings, whole_lines=True)
        return ReadDocument(f"{KIND}/{key}", row["title"][:500], text, self._web(row), when, meta, sections)

    def _attachment_item(self, key: str, row: dict) -> Item:
        """An attachment read by ``read_bytes``; an ``error`` item when it cannot be read."""
        version, link = str(row["version"]["number"]), (row.get("_links") or {}).get("download")
        container = str((row.get("container") or {}).get("id", ""))
        permission = self.permission_of(container) if container else None
        if not link or not _wanted_file(row):
            return Item(key, version, error=f"{row.get('title')}: not a readable attachment (type or size).")
        try:
            data = self._get(link, what=f"the attachment {row['title']!r}", missing_ok=True, raw=True).content
            documents = read_bytes(data, name=row["title"], external_id=f"{KIND}/{key}", uri=self._web(row))
        except (_Unreadable, InvalidInput, UnsupportedFileType) as exc:
            gone = isinstance(exc, _Unreadable) and exc.args[0] == 404
            error = f"{row['title']}: HTTP {exc.args[0]}" if isinstance(exc, _Unreadable) else str(exc)
            return Item(key, deleted=True) if gone else Item(key, version, error=error, permission=permission)
        for document in documents:
            document.title, document.published_at = row["title"][:500], _when(row)
            document.metadata = {**document.metadata, **self._metadata(row, _when(row))}
        return Item(key, version, documents, permission=permission)

    def _metadata(self, row: dict, when: datetime) -> dict:
        space, by = row.get("space") or {}, (row.get("version") or {}).get("by") or {}
        place = space.get("name") or (self._spaces or {}).get(space.get("key"), {}).get("name", "")
        return dict(author=by.get("displayName", ""), place=place, updated_at=when.isoformat(), source_kind=KIND)

    def _web(self, row: dict) -> str:
        link = (row.get("_links") or {}).get("webui") or ""
        return f"{self.base}{link}" if link.startswith("/") else link

    def _comments(self, content_id: str) -> list[dict]:
        """The footer comments of a page or blog post, replies included, oldest first."""
        path = f"rest/api/content/{content_id}/child/comment"
        params = {"expand": "body.storage,version,extensions", "depth": "all", "limit": 100}
        try:
            return _footer(list(self._paged(path, params, what="a page's comments", missing_ok=True)))
        except _Unreadable:
            return []

    def _all_comments(self) -> dict[str, list[dict]]:
        """The footer comments of every page of the spaces, by page id (one search)."""
        by_page: dict[str, list[dict]] = {}
        cql, expand = f"type = comment{self._space_clause()}", "body.storage,version,container,extensions"
        for row in self._search(cql, expand=expand, limit=BODY_BATCH, what="the comments"):
            if row.get("container"):
                by_page.setdefault(str(row["container"]["id"]), []).append(row)
        return {page: _footer(rows) for page, rows in by_page.items()}

    # -- permissions (Cloud) ---------------------------------------------------------------------

    def permissions(self, keys: list[str]) -> Iterator[tuple[str, Permission | None]]:
        """``(key, permission_of(...))``, an attachment's its page's; places searched 50 per request."""
        ids = [key.partition("/")[2] for key in keys]
        if self.cloud:
            self._places(ids)
            self._places([self._lineage[i][1] for i in ids if self._lineage.get(i, ("",))[0] == "on"])
        for key, content_id in zip(keys, ids, strict=True):
            lineage = self._lineage.get(content_id)
            yield key, self.permission_of(lineage[1] if lineage and lineage[0] == "on" else content_id)

    def permission_of(self, content_id: str) -> Permission | None:
        """Who may see a page or blog post: its space's readers narrowed by its own and its
        ancestors' read restrictions. ``None`` on Data Center, or when any cannot be read."""
        lineage = self._lineage.get(content_id)
        if not self.cloud or not lineage or lineage[0] != "in":
            return None
        chain = (*lineage[2], content_id)
        self._places([c for c in chain if c not in self._restrictions])
        readers = self.space_readers(lineage[1])
        for restricted in chain:
            restriction = self.restriction(restricted) if readers is not None else None
            if restriction is None:
                return None
            readers = self._intersect(readers, restriction)
        return readers

    def _remember(self, row: dict) -> None:
        """Keep a searched content's place and, when expanded, its restriction."""
        content_id = str(row["id"])
        if row.get("type") == "attachment" and row.get("container"):
            self._lineage[content_id] = ("on", str(row["container"]["id"]))
        elif row.get("space"):
            ancestors = tuple(str(a["id"]) for a in row.get("ancestors") or [])
            self._lineage[content_id] = ("in", row["space"]["key"], ancestors)
        read = ((row.get("restrictions") or {}).get("read") or {}).get("restrictions")
        if isinstance(read, dict) and "user" in read and "group" in read:
            self._restrictions[content_id] = self._restriction_of(read)

    def _places(self, ids: list[str]) -> None:
        """Search the places and restrictions of ``ids`` not known yet (Cloud), 50 per request."""
        todo = sorted({i for i in ids if i.isdigit() and (i not in self._lineage or i not in self._restrictions)})
        for batch in _chunks(todo if self.cloud else [], BODY_BATCH):
            cql = f"id in ({', '.join(batch)})"
            for row in self._search(cql, expand=PLACE_EXPAND, limit=BODY_BATCH, what="the pages' restrictions"):
                self._remember(row)

    def restriction(self, content_id: str) -> Permission | None:
        """The read restriction set on one page (not its ancestors), from a search or else from
        ``restriction/byOperation/read``: ``PUBLIC`` when there is none, ``None`` if unreadable."""
        if content_id not in self._restrictions:
            path = f"rest/api/content/{content_id}/restriction/byOperation/read"
            params = {"expand": "restrictions.user,restrictions.group", "limit": 200}
            try:
                data = self._get(path, params, what="a page's restrictions", missing_ok=True)
                self._restrictions[content_id] = self._restriction_of(data.get("restrictions") or {})
            except _Unreadable:
                self._restrictions[content_id] = None
        return self._restrictions[content_id]

    def _restriction_of(self, restrictions: dict) -> Permission:
        """A restriction's users (by visible e-mail) and groups (by id); ``PUBLIC`` (the
        intersection's identity) when it names nobody; nobody when only hidden users."""
        users = (restrictions.get("user") or {}).get("results") or []
        groups = (restrictions.get("group") or {}).get("results") or []
        if not users and not groups:
            return PUBLIC
        emails = {u["email"] for u in users if u.get("email")}
        emails |= self._account_emails({u["accountId"] for u in users if u.get("accountId") and not u.get("email")})
        return Permission.of(emails=emails, groups=[str(g.get("id") or g.get("name")) for g in groups])

    def space_readers(self, key: str) -> Permission | None:
        """Who may read space ``key`` (v2 space permissions): anonymous access or an
        ``everyone_groups`` group make it public; ``None`` when they cannot be read."""
        if key not in self._space_readers:
            space, public, accounts, groups = self.spaces().get(key), False, set(), set()
            path, what = f"api/v2/spaces/{(space or {}).get('id')}/permissions", f"the permissions of {key}"
            try:
                for row in self._paged(path, {"limit": LISTING_LIMIT}, what=what, missing_ok=True) if space else ():
                    operation, principal = row.get("operation") or {}, row.get("principal") or {}
                    kind, principal_id = principal.get("type"), str(principal.get("id") or "")
                    if (operation.get("key"), operation.get("targetType")) != ("read", "space"):
                        continue
                    if kind == "user":
                        accounts.add(principal_id)
                    elif kind == "group" and self.group_names().get(principal_id, "").lower() not in self.everyone:
                        groups.add(principal_id)
                    elif kind == "group" or "anonymous" in principal_id.lower():
                        public = True
                readers = Permission.of(public=public, emails=self._account_emails(accounts), groups=groups)
            except _Unreadable:
                readers = None
            self._space_readers[key] = readers if space else None
        return self._space_readers[key]

    def _intersect(self, a: Permission, b: Permission) -> Permission:
        """Who is in both: groups in both stay groups; the rest by e-mail, groups by their members."""
        if a.public or b.public:
            return b if a.public else a
        shared = a.groups & b.groups

        def people(p: Permission) -> set[str]:
            return set(p.emails).union(*(self.group_emails(g) for g in p.groups - shared))

        return Permission.of(emails=people(a) & people(b), groups=shared)

    def _account_emails(self, accounts: set[str]) -> set[str]:
        """The visible e-mails of Cloud ``accounts`` (``rest/api/user/bulk``, 100 per request)."""
        for batch in _chunks(sorted(a for a in accounts if a and a not in self._emails), 100):
            data = self._get("rest/api/user/bulk", {"accountId": batch, "limit": 100}, what="the users' e-mails")
            for user in data.get("results") or []:
                self._emails[user.get("accountId", "")] = user.get("email") or ""
            for account in batch:
                self._emails.setdefault(account, "")
        return {self._emails[a] for a in accounts if self._emails.get(a)}

    # -- groups ----------------------------------------------------------------------------------

    def group_names(self) -> dict[str, str]:
        """Cloud group id -> name, for every group of the site (200 per request)."""
        if self._group_names is None:
            rows = self._paged("rest/api/group", {"limit": 200}, what="the groups")
            self._group_names = {str(row.get("id") or row["name"]): row["name"] for row in rows}
        return self._group_names

    def group_emails(self, group_id: str) -> frozenset[str]:
        """A Cloud group's members' visible e-mails (``rest/api/group/member``, 200 per request)."""
        if group_id not in self._members:
            rows = self._paged("rest/api/group/member", {"groupId": group_id, "limit": 200}, what="a group's members")
            self._members[group_id] = frozenset(row["email"].lower() for row in rows if row.get("email"))
        return self._members[group_id]

    def groups(self) -> Iterator[SourceGroup]:
        """Every group of the site but ``everyone_groups`` (public), with its members (Cloud only)."""
        for group_id, name in sorted(self.group_names().items()) if self.cloud else ():
            if name.lower() not in self.everyone:
                yield SourceGroup(group_id, f"{KIND}:group:{name}", self.group_emails(group_id))
