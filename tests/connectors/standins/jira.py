"""A Jira stand-in (Cloud or Data Center), written from the Jira REST API v2 reference: what the
Jira connector asks, with Jira's shapes.

* ``serverInfo`` (``deploymentType``), ``myself`` (with ``timeZone``: JQL dates are read in it),
  ``field``, ``project?expand=lead``;
* searches: ``/rest/api/2/search/jql`` with ``nextPageToken`` on Cloud (where ``/search`` answers
  410, as Jira Cloud does since its removal), ``/rest/api/2/search`` with ``startAt``/``total`` on
  Data Center; the JQL the connector writes (``project in (...)``, ``updated >= "yyyy/MM/dd
  HH:mm"``, ``level is not EMPTY``, ``ORDER BY``), anything else a 400 as Jira's parser gives;
* ``issue/{key}`` (404 when gone), ``issue/{key}/comment`` (``startAt`` pages);
* permissions: ``project/{key}/permissionscheme`` (holders of ``BROWSE_PROJECTS``),
  ``project/{key}/role/{id}`` (actors), ``user``, ``group/member`` (``startAt``/``isLast``, 50
  a page), ``issuesecurityschemes/level/member`` (Cloud only); with ``admin=False`` these answer
  403, as for a credential without "Administer Jira" or project admin.

Credentials: Cloud takes ``Authorization: Basic`` of ``token`` (``email:api_token``), Data Center
``Authorization: Bearer``; a revoked one answers 401 with Jira's ``errorMessages``.

Times move only when a test says: ``tick(minutes)``; each change stamps ``updated`` with the clock.
"""

from __future__ import annotations

import base64
import re
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

from tests.connectors.standin import Request, StandIn, route

API = "/rest/api/2/"
FIELDS = [
    ("summary", "Summary", ["summary"]),
    ("description", "Description", ["description"]),
    ("comment", "Comment", ["comment"]),
    ("reporter", "Reporter", ["reporter"]),
    ("assignee", "Assignee", ["assignee"]),
    ("created", "Created", ["created", "createdDate"]),
    ("updated", "Updated", ["updated", "updatedDate"]),
    ("project", "Project", ["project"]),
    ("status", "Status", ["status"]),
    ("issuetype", "Issue Type", ["issuetype", "type"]),
    ("security", "Security Level", ["level"]),
]


class JqlError(ValueError):
    pass


def _errors(*messages: str) -> dict:
    return {"errorMessages": list(messages), "errors": {}}


class JiraStandIn(StandIn):
    """A Jira site on loopback (module docstring). Build the world with ``user``, ``group``,
    ``project``, ``role``, ``level`` and ``issue``; change it with ``edit``, ``comment``,
    ``delete`` and ``tick``."""

    def __init__(self, *, cloud: bool = True, zone: str = "America/New_York", admin: bool = True):
        super().__init__()
        self.cloud, self.zone, self.admin = cloud, ZoneInfo(zone), admin
        self.token = "bot@example.com:cloud-api-token" if cloud else "dc-personal-access-token"
        self.clock = datetime(2024, 3, 1, 14, 0, 30, tzinfo=UTC)
        self.users: dict[str, dict] = {}
        self.groups: dict[str, list[str]] = {}
        self.projects: dict[str, dict] = {}
        self.levels: dict[str, list[dict]] = {}
        self.issues: dict[str, dict] = {}
        self.comments_embedded = 20  # the comments a search or issue embeds; the rest by /comment
        self.user("bot", "Sync Bot", "bot@example.com")

    # -- building the world --------------------------------------------------------------------

    def tick(self, minutes: float = 1) -> None:
        self.clock += timedelta(minutes=minutes)

    def user(self, user_id: str, name: str, email: str | None, *, active: bool = True) -> None:
        """A user; ``email=None``: one whose address Jira hides (profile visibility)."""
        self.users[user_id] = {"id": user_id, "name": name, "email": email, "active": active}

    def group(self, name: str, *user_ids: str) -> None:
        self.groups[name] = list(user_ids)

    def project(self, key: str, name: str, *, lead: str = "bot", browse=(("applicationRole", ""),), visible=True):
        """A project whose permission scheme grants Browse Projects to ``browse``: holders
        ``(type, parameter)``, e.g. ``("group", "eng")``, ``("projectRole", "10002")``."""
        self.projects[key] = {
            "id": str(10000 + len(self.projects)),
            "key": key,
            "name": name,
            "lead": lead,
            "browse": [tuple(h) for h in browse],
            "roles": {},
            "visible": visible,
            "next": 1,
        }

    def role(self, project: str, role_id: str, name: str, *, users=(), groups=()) -> None:
        self.projects[project]["roles"][role_id] = {"name": name, "users": list(users), "groups": list(groups)}

    def level(self, level_id: str, *holders) -> None:
        """A security level whose members are ``holders``: ``(type, parameter)`` pairs."""
        self.levels[level_id] = [tuple(h) for h in holders]

    def issue(self, project: str, summary: str, description: str = "", *, reporter="bot", assignee=None, level=None):
        """A new issue (stamped now); returns its key."""
        spec = self.projects[project]
        key = f"{project}-{spec['next']}"
        spec["next"] += 1
        self.issues[key] = {
            "id": str(20000 + len(self.issues)),
            "key": key,
            "project": project,
            "summary": summary,
            "description": description,
            "reporter": reporter,
            "assignee": assignee,
            "level": level,
            "comments": [],
            "status": "To Do",
            "type": "Task",
            "created": self.clock,
            "updated": self.clock,
        }
        return key

    def edit(self, key: str, **changes) -> None:
        self.issues[key].update(changes, updated=self.clock)

    def comment(self, key: str, author: str, body: str) -> None:
        issue = self.issues[key]
        number = sum(len(i["comments"]) for i in self.issues.values()) + 1
        issue["comments"].append({"id": str(30000 + number), "author": author, "body": body, "created": self.clock})
        issue["updated"] = self.clock

    def delete(self, key: str) -> None:
        del self.issues[key]

    # -- shapes --------------------------------------------------------------------------------

    def authorized(self, request: Request) -> bool:
        header = request.headers.get("Authorization", "")
        if self.cloud:
            return header == "Basic " + base64.b64encode(self.token.encode()).decode()
        return header == f"Bearer {self.token}"

    def unauthorized(self, request: Request):
        return 401, _errors("You are not authenticated. Authentication required to perform this operation.")

    def not_found(self, request: Request):
        return 404, _errors("null for uri: " + request.path)

    def _time(self, moment: datetime) -> str:
        local = moment.astimezone(self.zone)
        return local.strftime("%Y-%m-%dT%H:%M:%S.") + f"{local.microsecond // 1000:03d}" + local.strftime("%z")

    def _user(self, user_id: str | None) -> dict | None:
        if user_id is None or user_id not in self.users:
            return None
        user = self.users[user_id]
        shape = {"accountId": user_id} if self.cloud else {"name": user_id, "key": user_id}
        by = "accountId" if self.cloud else "username"
        shape.update(displayName=user["name"], active=user["active"], self=f"{self.url}rest/api/2/user?{by}={user_id}")
        if user["email"]:
            shape["emailAddress"] = user["email"]
        return shape

    def _comment(self, comment: dict) -> dict:
        created = self._time(comment["created"])
        author = self._user(comment["author"])
        return {"id": comment["id"], "author": author, "body": comment["body"], "created": created, "updated": created}

    def _issue(self, issue: dict, fields: list[str]) -> dict:
        project = self.projects[issue["project"]]
        comments = [self._comment(c) for c in issue["comments"]]
        level = issue["level"]
        values = {
            "summary": issue["summary"],
            "description": issue["description"] or None,
            "comment": {
                "comments": comments[: self.comments_embedded],
                "maxResults": self.comments_embedded,
                "total": len(comments),
                "startAt": 0,
            },
            "reporter": self._user(issue["reporter"]),
            "assignee": self._user(issue["assignee"]),
            "created": self._time(issue["created"]),
            "updated": self._time(issue["updated"]),
            "project": {"id": project["id"], "key": project["key"], "name": project["name"]},
            "status": {"name": issue["status"]},
            "issuetype": {"name": issue["type"]},
            "security": {"id": level, "name": f"Level {level}"} if level else None,
        }
        wanted = set(values) if not fields or "*all" in fields else set(fields)
        return {
            "id": issue["id"],
            "key": issue["key"],
            "self": f"{self.url}rest/api/2/issue/{issue['id']}",
            "fields": {name: value for name, value in values.items() if name in wanted},
        }

    @staticmethod
    def _fields(request: Request) -> list[str]:
        raw = request.query.get("fields") or []
        if not raw and request.method == "POST":
            raw = request.form().get("fields") or []
        return [f.strip() for value in raw for f in value.split(",") if f.strip()]

    # -- JQL -----------------------------------------------------------------------------------

    def _select(self, jql: str) -> list[dict]:
        """The issues ``jql`` finds, in its order; ``JqlError`` for what this stand-in (and the
        connector) does not speak."""
        parts = re.split(r"\s+ORDER\s+BY\s+", jql.strip(), maxsplit=1, flags=re.I)
        main, order = parts[0], parts[1] if len(parts) > 1 else ""
        tests = []
        for clause in re.split(r"\s+AND\s+", main.strip(), flags=re.I):
            tests.append(self._clause(clause.strip()))
        found = [i for i in self.issues.values() if all(test(i) for test in tests)]
        for part in reversed([p.strip() for p in order.split(",") if p.strip()]):
            name, _, direction = part.partition(" ")
            sort = {
                "updated": lambda i: (i["updated"], int(i["id"])),
                "created": lambda i: (i["created"], int(i["id"])),
                "key": lambda i: (i["project"], int(i["key"].rpartition("-")[2])),
            }.get(name.lower())
            if sort is None:
                raise JqlError(f"Not able to sort using field '{name}'.")
            found.sort(key=sort, reverse=direction.strip().upper() == "DESC")
        return found

    def _clause(self, clause: str):
        if match := re.fullmatch(r"project\s+in\s+\((.*)\)", clause, flags=re.I):
            keys = [k.strip().strip('"') for k in match.group(1).split(",")]
        elif match := re.fullmatch(r'project\s*=\s*"?([A-Z][A-Z0-9_]*)"?', clause, flags=re.I):
            keys = [match.group(1)]
        elif match := re.fullmatch(r'updated\s*>=\s*"(\d{4}/\d{2}/\d{2} \d{2}:\d{2})"', clause, flags=re.I):
            since = datetime.strptime(match.group(1), "%Y/%m/%d %H:%M").replace(tzinfo=self.zone)
            return lambda issue: issue["updated"] >= since
        elif re.fullmatch(r"level\s+is\s+not\s+EMPTY", clause, flags=re.I):
            return lambda issue: bool(issue["level"])
        else:
            raise JqlError(f"Error in the JQL Query: cannot read '{clause}'.")
        for key in keys:
            if key not in self.projects or not self.projects[key]["visible"]:
                raise JqlError(f"The value '{key}' does not exist for the field 'project'.")
        return lambda issue: issue["project"] in keys

    # -- routes: the site ----------------------------------------------------------------------

    @route("GET", r"/rest/api/2/serverInfo")
    def server_info(self, request):
        version = [1001, 0, 0] if self.cloud else [9, 12, 4]
        return 200, {
            "baseUrl": self.url.rstrip("/"),
            "version": ".".join(map(str, version)),
            "versionNumbers": version,
            "deploymentType": "Cloud" if self.cloud else "Server",
            "buildNumber": 100250,
            "serverTitle": "Jira",
        }

    @route("GET", r"/rest/api/2/myself")
    def myself(self, request):
        return 200, {**self._user("bot"), "timeZone": str(self.zone), "locale": "en_US"}

    @route("GET", r"/rest/api/2/field")
    def fields(self, request):
        return 200, [
            {"id": i, "key": i, "name": n, "custom": False, "navigable": True, "searchable": True, "clauseNames": c}
            for i, n, c in FIELDS
        ]

    @route("GET", r"/rest/api/2/project")
    def project_list(self, request):
        expand = request.arg("expand", "") or ""
        out = []
        for spec in self.projects.values():
            if spec["visible"]:
                shape = {"id": spec["id"], "key": spec["key"], "name": spec["name"], "projectTypeKey": "software"}
                if "lead" in expand:
                    shape["lead"] = self._user(spec["lead"])
                out.append(shape)
        return 200, out

    # -- routes: issues ------------------------------------------------------------------------

    @route("GET", r"/rest/api/2/search")
    def search(self, request):
        if self.cloud:
            return 410, _errors("The requested API has been removed. Please migrate to the /rest/api/3/search/jql API.")
        try:
            found = self._select(request.arg("jql", ""))
        except JqlError as error:
            return 400, _errors(str(error))
        start = int(request.arg("startAt", 0) or 0)
        size = min(int(request.arg("maxResults", 50) or 50), 1000)
        fields = self._fields(request)
        page = [self._issue(i, fields) for i in found[start : start + size]]
        return 200, {
            "expand": "schema,names",
            "startAt": start,
            "maxResults": size,
            "total": len(found),
            "issues": page,
        }

    @route("GET", r"/rest/api/2/search/jql")
    def search_jql(self, request):
        return self._enhanced(request)

    @route("POST", r"/rest/api/2/search/jql")
    def search_jql_post(self, request):
        return self._enhanced(request)

    def _enhanced(self, request):
        if not self.cloud:
            return self.not_found(request)
        try:
            found = self._select(request.arg("jql", ""))
        except JqlError as error:
            return 400, _errors(str(error))
        token = request.arg("nextPageToken")
        start = int(base64.urlsafe_b64decode(token.encode()).decode()) if token else 0
        size = min(int(request.arg("maxResults", 50) or 50), 5000)
        fields = self._fields(request)
        page = [self._issue(i, fields) for i in found[start : start + size]]
        answer = {"issues": page, "isLast": start + size >= len(found)}
        if not answer["isLast"]:
            answer["nextPageToken"] = base64.urlsafe_b64encode(str(start + size).encode()).decode()
        return 200, answer

    @route("GET", r"/rest/api/2/issue/([A-Z][A-Z0-9_]*-\d+)")
    def get_issue(self, request, key):
        issue = self.issues.get(key)
        if issue is None:
            return 404, _errors("Issue does not exist or you do not have permission to see it.")
        return 200, self._issue(issue, self._fields(request))

    @route("GET", r"/rest/api/2/issue/([A-Z][A-Z0-9_]*-\d+)/comment")
    def get_comments(self, request, key):
        issue = self.issues.get(key)
        if issue is None:
            return 404, _errors("Issue does not exist or you do not have permission to see it.")
        start = int(request.arg("startAt", 0) or 0)
        size = min(int(request.arg("maxResults", 100) or 100), 100)
        comments = [self._comment(c) for c in issue["comments"]]
        return 200, {
            "startAt": start,
            "maxResults": size,
            "total": len(comments),
            "comments": comments[start : start + size],
        }

    # -- routes: who may see -------------------------------------------------------------------

    def _holder(self, kind: str, parameter: str) -> dict:
        shape = {"type": kind}
        if parameter:
            shape.update(parameter=parameter, value=parameter)
        if kind == "group":
            shape.update(expand="group", group={"name": parameter, "groupId": f"gid-{parameter}"})
        elif kind == "user":
            shape.update(expand="user", user=self._user(parameter))
        elif kind == "projectRole":
            shape.update(expand="projectRole")
        return shape

    @route("GET", r"/rest/api/2/project/([A-Z][A-Z0-9_]*)/permissionscheme")
    def permission_scheme(self, request, key):
        if key not in self.projects:
            return 404, _errors(f"No project could be found with key '{key}'.")
        if not self.admin:
            return 403, _errors("You don't have permission to view this project's permission scheme.")
        scheme = {"id": 10000, "name": f"{key} permission scheme", "description": ""}
        if "permissions" in (request.arg("expand", "") or ""):
            grants = [("BROWSE_PROJECTS", h) for h in self.projects[key]["browse"]]
            grants += [("CREATE_ISSUES", ("group", "jira-software-users"))]
            scheme["permissions"] = [
                {"id": 10100 + n, "holder": self._holder(*holder), "permission": permission}
                for n, (permission, holder) in enumerate(grants)
            ]
        return 200, scheme

    @route("GET", r"/rest/api/2/project/([A-Z][A-Z0-9_]*)/role/(\d+)")
    def project_role(self, request, key, role_id):
        if not self.admin:
            return 403, _errors("You cannot view the actors of this project role.")
        role = self.projects.get(key, {}).get("roles", {}).get(role_id)
        if role is None:
            return 404, _errors(f"Can not retrieve a role actor for a null project role: {role_id}")
        actors = []
        for user_id in role["users"]:
            actor = {
                "id": len(actors) + 1,
                "displayName": self.users[user_id]["name"],
                "type": "atlassian-user-role-actor",
            }
            actor.update({"actorUser": {"accountId": user_id}} if self.cloud else {"name": user_id})
            actors.append(actor)
        for name in role["groups"]:
            actor = {"id": len(actors) + 1, "displayName": name, "type": "atlassian-group-role-actor", "name": name}
            if self.cloud:
                actor["actorGroup"] = {"name": name, "displayName": name, "groupId": f"gid-{name}"}
            actors.append(actor)
        return 200, {"self": request.path, "name": role["name"], "id": int(role_id), "actors": actors}

    @route("GET", r"/rest/api/2/user")
    def get_user(self, request):
        user = self._user(request.arg("accountId") if self.cloud else request.arg("username"))
        if user is None:
            return 404, _errors("Specified user does not exist or you do not have required permissions")
        return 200, user

    @route("GET", r"/rest/api/2/group/member")
    def group_member(self, request):
        name = request.arg("groupname", "")
        if name not in self.groups:
            return 404, _errors(f"Group '{name}' does not exist.")
        inactive = (request.arg("includeInactiveUsers", "false") or "").lower() == "true"
        members = [self._user(u) for u in self.groups[name] if inactive or self.users[u]["active"]]
        return 200, self._paged(request, members, 50)

    @route("GET", r"/rest/api/2/issuesecurityschemes/level/member")
    def level_members(self, request):
        if not self.cloud:
            return self.not_found(request)
        if not self.admin:
            return 403, _errors("You are not authorized to perform this action. Administrator privileges are required.")
        level_id = request.arg("levelId", "")
        values = [
            {
                "id": str(n),
                "issueSecurityLevelId": level_id,
                "issueSecuritySchemeId": "10000",
                "holder": self._holder(*h),
            }
            for n, h in enumerate(self.levels.get(level_id, []))
        ]
        return 200, self._paged(request, values, 50)

    @staticmethod
    def _paged(request: Request, values: list, cap: int) -> dict:
        start = int(request.arg("startAt", 0) or 0)
        size = min(int(request.arg("maxResults", cap) or cap), cap)
        page = values[start : start + size]
        return {
            "startAt": start,
            "maxResults": size,
            "total": len(values),
            "isLast": start + size >= len(values),
            "values": page,
        }
