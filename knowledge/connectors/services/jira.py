"""Jira (Cloud and Data Center): one document per issue, with who may browse it.

Read with the ``jira`` package pointed at ``source.location`` (the site, e.g.
``https://example.atlassian.net``). The secret is ``email:api_token`` (Cloud, basic auth) or a
bare personal access token (Data Center, ``Authorization: Bearer``). Every request goes through
the address guard: the package's requests session gets ``guarded_session``'s adapters, whose
urllib3 ``Retry`` (``knowledge.connectors.http.retry_policy``) honours ``Retry-After`` up to ``MAX_RETRY_AFTER_S`` and retries
5xx answers; the package's own retry loop (``ResilientSession``) is turned off
(``max_retries=0``), so the two never multiply.

What is read (``options["projects"]``: project keys; default every project the credential
browses): each issue's summary, description and comments, reporter and assignee. Issues are found
with JQL, 100 a page: ``/rest/api/2/search/jql`` (``nextPageToken``) on Cloud,
``/rest/api/2/search`` (``startAt``) on Data Center, told apart by ``serverInfo``.

* ``changes``: ``project in (...) AND updated >= "yyyy/MM/dd HH:mm" ORDER BY updated ASC``, the
  time in the credential's own time zone (``myself``), as JQL reads it. JQL has minute
  precision, so the boundary minute is read again; the checkpoint remembers the issues already
  read in it (``seen``), which are skipped.
* ``listing``: every issue's key and ``updated`` (the fingerprint), ``fields=updated``.
* ``permissions`` (``jira_permissions``): the project's "Browse projects" grants, narrowed by the
  issue's security level.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from urllib.parse import urlsplit
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from django.conf import settings

from knowledge.connectors.base import Item, Permission, SourceGroup, SourceUnreachable
from knowledge.connectors.http import guarded_session, retry_policy, status_raise
from knowledge.connectors.services.jira_permissions import Access
from knowledge.ingestion.documents import ReadDocument

PAGE = 100  # issues per search page (Jira's cap for searches that return fields)
CONTENT_FIELDS = (
    "summary",
    "description",
    "comment",
    "reporter",
    "assignee",
    "created",
    "updated",
    "project",
    "status",
    "issuetype",
    "security",
)
PERMISSION_FIELDS = ("project", "security", "reporter", "assignee")
JQL_MINUTE = "%Y/%m/%d %H:%M"
JIRA_TIME = "%Y-%m-%dT%H:%M:%S.%f%z"
# Without the credential's time zone, a checkpoint is read back this far (the widest UTC offset).
UNKNOWN_ZONE_MARGIN = timedelta(hours=14)
# The most issues of the boundary minute a checkpoint remembers; more are read again next time.
SEEN_MAX = 500


def jira_time(value: str) -> datetime:
    """Jira's ``2024-01-02T10:15:30.000+0000`` as an aware datetime; ``ValueError`` when malformed."""
    return datetime.strptime(value, JIRA_TIME)


def _minute(moment: datetime) -> datetime:
    return moment.astimezone(UTC).replace(second=0, microsecond=0)


def _jql_list(keys) -> str:
    return ", ".join(f'"{key}"' for key in keys)


class JiraConnector:
    """A ``Connector`` for a Jira site (module docstring)."""

    kind = "jira"
    follows_permissions = True

    def __init__(self, source, secret: str):
        from jira import JIRA

        self.source = source
        self.site = source.location.strip().rstrip("/")
        options = source.options or {}
        self.project_keys = [str(key).strip().upper() for key in options.get("projects") or [] if str(key).strip()]
        if ":" in secret:
            email, _, token = secret.partition(":")
            auth = {"basic_auth": (email.strip(), token.strip())}
        else:
            auth = {"token_auth": secret.strip()}
        self.client = JIRA(
            server=self.site,
            options={"check_update": False},
            get_server_info=False,
            max_retries=0,
            timeout=settings.KB_CONNECTOR_TIMEOUT_S,
            **auth,
        )
        session = self.client._session
        for prefix, adapter in guarded_session().adapters.items():
            adapter.max_retries = retry_policy()
            session.mount(prefix, adapter)
        session.trust_env = False
        session.proxies = {}
        self._deployment: str | None = None

    # -- HTTP ----------------------------------------------------------------------------------

    def call(self, what: str, function, *args, quiet: tuple[int, ...] = (), **kwargs):
        """``function(*args, **kwargs)`` (a client method), its failures as connector errors.

        ``None`` when Jira answers a status in ``quiet`` (403 on a right the credential lacks,
        404 on an issue that is gone); ``CredentialRejected`` for 401 (or a 403 that names the
        login itself), ``SourceUnreachable`` for 429 and 5xx after retries, a dropped connection
        or any other status.
        """
        import requests
        from jira.exceptions import JIRAError

        try:
            return function(*args, **kwargs)
        except JIRAError as error:
            status = error.status_code or 0
            if status in quiet:
                return None
            headers = getattr(error.response, "headers", None) or {}
            detail = error.text or ""
            if status == 403 and "x-authentication-denied-reason" in headers:
                status = 401
            status_raise(status, what=f"Jira at {self.site} ({what})", detail=detail)
            raise SourceUnreachable(
                f"Jira at {self.site} answered {what} with HTTP {status}: {detail[:200]}"
            ) from error
        except requests.RequestException as error:
            raise SourceUnreachable(f"Jira at {self.site} could not be reached ({what}): {error}") from error

    def get(self, path: str, params: dict | None = None, *, quiet: tuple[int, ...] = ()):
        """The JSON of ``GET /rest/api/2/<path>`` (an endpoint the package has no method for)."""
        return self.call(path, self.client._get_json, path, params=params, quiet=quiet)

    def paged(self, path: str, params: dict, *, quiet: tuple[int, ...] = ()) -> list[dict] | None:
        """Every ``values`` entry of a ``startAt``/``isLast`` paged endpoint; ``None`` for ``quiet``."""
        values: list[dict] = []
        start = 0
        while True:
            page = self.get(path, {**params, "startAt": start, "maxResults": 50}, quiet=quiet)
            if page is None:
                return None
            batch = page.get("values") or []
            values.extend(batch)
            start += len(batch)
            last = page["isLast"] if "isLast" in page else start >= int(page.get("total") or 0)
            if last or not batch:
                return values

    @property
    def cloud(self) -> bool:
        """Whether the site is Jira Cloud (``serverInfo``'s ``deploymentType``), read once."""
        if self._deployment is None:
            info = self.call("serverInfo", self.client.server_info) or {}
            self._deployment = info.get("deploymentType") or "Server"
            self.client.deploymentType = self._deployment  # the package picks Cloud's APIs by it
        return self._deployment == "Cloud"

    def search(self, jql: str, fields) -> Iterator[dict]:
        """The raw issues ``jql`` finds, with ``fields``, page by page (``PAGE`` each)."""
        if self.cloud:
            token = None
            while True:
                page = self.call(
                    "search",
                    self.client.enhanced_search_issues,
                    jql,
                    nextPageToken=token,
                    maxResults=PAGE,
                    fields=list(fields),
                    json_result=True,
                )
                yield from page.get("issues") or []
                token = page.get("nextPageToken")
                if not token or page.get("isLast"):
                    return
        start = 0
        while True:
            page = self.call(
                "search",
                self.client.search_issues,
                jql,
                startAt=start,
                maxResults=PAGE,
                fields=list(fields),
                json_result=True,
            )
            issues = page.get("issues") or []
            yield from issues
            start += len(issues)
            if not issues or start >= int(page.get("total") or 0):
                return

    # -- what the source holds -----------------------------------------------------------------

    def projects(self) -> dict[str, dict]:
        """The projects read (key -> raw project, with its ``lead``), in order.

        ``SourceUnreachable`` when a project of ``options["projects"]`` is not visible to the
        credential (deleted, renamed, or its "Browse projects" taken away): nothing is deleted
        on a guess.
        """
        visible = {p.raw["key"]: p.raw for p in self.call("projects", self.client.projects, expand="lead")}
        if not self.project_keys:
            return dict(sorted(visible.items()))
        missing = [key for key in self.project_keys if key not in visible]
        if missing:
            raise SourceUnreachable(
                f"Jira at {self.site}: the credential cannot browse the project(s) {', '.join(missing)} "
                "(deleted, renamed, or its Browse Projects permission was removed). Fix the source's "
                '"projects" option or the permission; nothing was changed.',
                code="project_not_visible",
            )
        return {key: visible[key] for key in self.project_keys}

    def _zone(self):
        """The credential's time zone (JQL dates are read in it), or ``None`` when Jira says none."""
        me = self.call("myself", self.client.myself) or {}
        try:
            return ZoneInfo(me["timeZone"]) if me.get("timeZone") else None
        except (ZoneInfoNotFoundError, ValueError):
            return None

    def _since(self, moment: datetime) -> str:
        """``moment`` as a JQL date (``"yyyy/MM/dd HH:mm"``, the credential's zone), floored."""
        zone = self._zone()
        if zone is None:
            return (moment.astimezone(UTC) - UNKNOWN_ZONE_MARGIN).strftime(JQL_MINUTE)
        return moment.astimezone(zone).strftime(JQL_MINUTE)

    def document(self, issue: dict) -> ReadDocument:
        """The issue as a document: title ``KEY: summary``, Markdown text with its description and
        comments (all of them, read page by page when the search gave only the first)."""
        fields = issue.get("fields") or {}
        key = issue["key"]
        comments = self._comments(key, fields.get("comment") or {})
        project = fields.get("project") or {}
        reporter = (fields.get("reporter") or {}).get("displayName") or ""
        assignee = (fields.get("assignee") or {}).get("displayName") or "unassigned"
        facts = [
            f"**Project:** {project.get('name', '')} ({project.get('key', '')})",
            f"**Type:** {(fields.get('issuetype') or {}).get('name', '')}",
            f"**Status:** {(fields.get('status') or {}).get('name', '')}",
            f"**Reporter:** {reporter or 'unknown'}",
            f"**Assignee:** {assignee}",
        ]
        title = f"{key}: {fields.get('summary') or ''}".strip()
        parts = [f"# {title}", " · ".join(facts), (fields.get("description") or "").strip()]
        if comments:
            parts.append("## Comments")
            for comment in comments:
                author = (comment.get("author") or {}).get("displayName") or "unknown"
                created = comment.get("created")
                when = jira_time(created).astimezone(UTC).strftime("%Y-%m-%d %H:%M UTC") if created else "undated"
                parts.append(f"**{author}** ({when}):\n{(comment.get('body') or '').strip()}")
        updated = fields.get("updated") or ""
        host = urlsplit(self.site)
        return ReadDocument(
            external_id=f"jira/{host.netloc}{host.path}/{key}",
            title=title,
            text="\n\n".join(part for part in parts if part),
            uri=f"{self.site}/browse/{key}",
            published_at=jira_time(updated) if updated else None,
            metadata={
                "author": reporter,
                "place": project.get("name") or project.get("key") or "",
                "project": project.get("key") or "",
                "updated_at": jira_time(updated).isoformat() if updated else "",
                "source_kind": self.kind,
            },
        )

    def _comments(self, key: str, field: dict) -> list[dict]:
        comments = list(field.get("comments") or [])
        total = int(field.get("total") or len(comments))
        while len(comments) < total:
            page = self.get(f"issue/{key}/comment", {"startAt": len(comments), "maxResults": PAGE}) or {}
            batch = page.get("comments") or []
            if not batch:
                break
            comments.extend(batch)
        return comments

    def item(self, issue: dict, access: Access, checkpoint: dict | None = None) -> Item:
        fields = issue.get("fields") or {}
        return Item(
            key=issue["key"],
            fingerprint=fields.get("updated") or "",
            documents=[self.document(issue)],
            permission=access.issue(issue),
            checkpoint=checkpoint,
        )

    # -- Connector ----------------------------------------------------------------------

    def check(self) -> str:
        """Who the credential is, which projects it reads, and in how many the permissions can be read."""
        me = self.call("myself", self.client.myself) or {}
        edition = "Jira Cloud" if self.cloud else "Jira Data Center"
        projects = self.projects()
        access = Access(self, projects)
        readable = sum(1 for key in projects if access.project(key) is not None)
        who = me.get("displayName") or me.get("name") or "?"
        if me.get("emailAddress"):
            who += f" <{me['emailAddress']}>"
        keys = ", ".join(list(projects)[:10]) + (", ..." if len(projects) > 10 else "")
        line = f"{edition} as {who}: {len(projects)} projects ({keys or 'none'})"
        line += f"; who may browse them readable in {readable} of {len(projects)}"
        if readable < len(projects):
            line += " (the others' issues will be visible to the tenant's admins only: grant project admin)"
        return line + "."

    def changes(self, checkpoint: dict) -> Iterator[Item]:
        """Issues updated since ``checkpoint`` (``{"updated": <Jira time>, "seen": {key: updated}}``;
        every issue when it is ``{}``), oldest first; deletions are left to ``listing``."""
        projects = self.projects()
        if not projects:
            return
        latest = checkpoint.get("updated") or ""
        seen = dict(checkpoint.get("seen") or {}) if latest else {}
        jql = f"project in ({_jql_list(projects)})"
        if latest:
            jql += f' AND updated >= "{self._since(jira_time(latest))}"'
        access = Access(self, projects)
        for issue in self.search(jql + " ORDER BY updated ASC", CONTENT_FIELDS):
            key, updated = issue["key"], (issue.get("fields") or {}).get("updated") or ""
            if not updated or seen.get(key) == updated:
                continue  # read in the boundary minute by the last run, unchanged since
            if not latest or jira_time(updated) > jira_time(latest):
                if not latest or _minute(jira_time(updated)) > _minute(jira_time(latest)):
                    seen = {}
                latest = updated
            if _minute(jira_time(updated)) == _minute(jira_time(latest)) and len(seen) < SEEN_MAX:
                seen[key] = updated
            yield self.item(issue, access, {"updated": latest, "seen": dict(seen)})

    def listing(self) -> Iterator[tuple[str, str]]:
        """``(key, updated)`` of every issue of the projects read, 100 a page."""
        projects = self.projects()
        if not projects:
            return
        for issue in self.search(f"project in ({_jql_list(projects)}) ORDER BY created ASC", ("updated",)):
            yield issue["key"], (issue.get("fields") or {}).get("updated") or ""

    def fetch(self, keys: list[str]) -> Iterator[Item]:
        """Each issue of ``keys`` read again (one request each); ``deleted`` when Jira no longer
        shows it under that key (deleted, moved to another project, or no longer browsable)."""
        if not keys:
            return
        projects = self.projects()
        access = Access(self, projects)
        for key in keys:
            issue = self.call("issue", self.client.issue, key, fields=",".join(CONTENT_FIELDS), quiet=(404,))
            raw = issue.raw if issue is not None else None
            project = key.rpartition("-")[0]
            if raw is None or raw.get("key") != key or project not in projects:
                yield Item(key=key, deleted=True)
            else:
                yield self.item(raw, access)

    def permissions(self, keys: list[str]) -> Iterator[tuple[str, Permission | None]]:
        """Each key's permission: its project's, narrowed by its security level; ``None`` where
        they cannot be read (fail closed). Requests grow with the projects and the issues that have
        a security level, not with the issues."""
        if not keys:
            return
        projects = self.projects()
        access = Access(self, projects)
        wanted = [key for key in dict.fromkeys(key.rpartition("-")[0] for key in keys) if key in projects]
        levelled = {}
        if wanted:
            jql = f"project in ({_jql_list(wanted)}) AND level is not EMPTY ORDER BY key ASC"
            levelled = {issue["key"]: issue for issue in self.search(jql, PERMISSION_FIELDS)}
        for key in keys:
            project = key.rpartition("-")[0]
            if project not in projects:
                yield key, None
            elif key in levelled:
                yield key, access.issue(levelled[key])
            else:
                yield key, access.project(project)

    def groups(self) -> Iterator[SourceGroup]:
        """Every Jira group the permissions name (granted "Browse projects", in a project role that
        is, or in a security level in use), with its active members' e-mail addresses."""
        projects = self.projects()
        access = Access(self, projects)
        names: set[str] = set()
        open_projects = []
        for key in projects:
            permission = access.project(key)
            if permission is not None and permission.public:
                open_projects.append(key)
            elif permission is not None:
                names |= permission.groups
        if open_projects:  # elsewhere a level's groups are those of the project's grants, or people
            jql = f"project in ({_jql_list(open_projects)}) AND level is not EMPTY ORDER BY key ASC"
            for issue in self.search(jql, PERMISSION_FIELDS):
                names |= access.level_groups(issue)
        for name in sorted(names):
            yield SourceGroup(name, f"jira:group:{name}", access.members(name) or frozenset())
