"""Who may see a Jira issue: the project's "Browse projects" grants, narrowed by the issue's
security level (``knowledge.connectors.services.jira``).

A project's grants come from its permission scheme
(``/rest/api/2/project/{key}/permissionscheme?expand=permissions,...``), each holder mapped so:

* ``anyone`` (anonymous access) and ``applicationRole`` (every user with Jira access): public,
  the whole tenant;
* ``group``: the group (``SourceGroup`` ``jira:group:<name>``, members from
  ``/rest/api/2/group/member``);
* ``projectRole``: the role's actors (``/rest/api/2/project/{key}/role/{id}``): its users by
  e-mail, its groups as groups;
* ``user`` and ``projectLead``: that person's e-mail;
* holders that depend on the issue (reporter, assignee, user or group custom fields) and Service
  Management's portal customers are not mapped: those people see the issue in the product only if
  another grant names them (narrower than Jira, never wider).

A security level's members come from ``/rest/api/2/issuesecurityschemes/level/member`` (Jira
Cloud, "Administer Jira"); there the issue's reporter and assignee are mapped too. Data Center has
no API that lists a level's members, so its issues with a security level have no permission
(``None``: the tenant's admins only), as has any issue whose project grants or level members the
credential may not read (fail closed). An issue with a level is visible to those in both: groups
named on both sides stay groups, everyone else is listed by e-mail.

Users' e-mail addresses come with the scheme's holders or from ``/rest/api/2/user``; a user whose
address Jira hides (Cloud profile visibility) cannot be matched and is left out.
"""

from __future__ import annotations

from knowledge.connectors.base import PUBLIC, Permission

PUBLIC_HOLDERS = {"anyone", "applicationRole"}
BROWSE = "BROWSE_PROJECTS"
DENIED = (400, 403, 404)  # a right the credential lacks, or an API the server does not have


def _user_id(user: dict) -> str:
    return user.get("accountId") or user.get("name") or user.get("key") or ""


class Access:
    """Reads and caches, for one call of the connector, who may browse ``projects`` (key -> raw
    project with its ``lead``): schemes, roles, security levels, users' e-mails, groups' members."""

    def __init__(self, connector, projects: dict[str, dict]):
        self.connector, self.projects = connector, projects
        self._projects: dict[str, Permission | None] = {}
        self._roles: dict[tuple[str, str], tuple[set[str], set[str]] | None] = {}
        self._levels: dict[str, list[dict] | None] = {}
        self._emails: dict[str, str] = {}
        self._members: dict[str, frozenset[str] | None] = {}

    # -- projects and issues -------------------------------------------------------------------

    def project(self, key: str) -> Permission | None:
        """Who may browse project ``key``'s issues that have no security level; ``None`` when
        the scheme or a role of it cannot be read."""
        if key not in self._projects:
            scheme = self.connector.get(
                f"project/{key}/permissionscheme", {"expand": "permissions,user,group,projectRole"}, quiet=DENIED
            )
            if scheme is None or "permissions" not in scheme:
                self._projects[key] = None
            else:
                holders = [
                    grant.get("holder") or {} for grant in scheme["permissions"] if grant.get("permission") == BROWSE
                ]
                self._projects[key] = self._holders(key, holders, issue=None)
        return self._projects[key]

    def issue(self, issue: dict) -> Permission | None:
        """Who may see ``issue`` (raw, with ``project``, ``security``, ``reporter`` and ``assignee``)."""
        fields = issue.get("fields") or {}
        key = (fields.get("project") or {}).get("key") or issue["key"].rpartition("-")[0]
        if key not in self.projects:
            return None
        base = self.project(key)
        level = fields.get("security")
        if base is None or not level:
            return base
        holders = self._level(str(level.get("id", "")))
        if holders is None:
            return None
        narrowed = self._holders(key, holders, issue=issue)
        return None if narrowed is None else self._both(base, narrowed)

    def level_groups(self, issue: dict) -> set[str]:
        """The groups ``issue``'s security level names (none when it cannot be read)."""
        permission = self.issue(issue)
        return set(permission.groups) if permission is not None else set()

    def members(self, group: str) -> frozenset[str] | None:
        """The e-mail addresses of ``group``'s active members; ``None`` when they cannot be read."""
        if group not in self._members:
            values = self.connector.paged(
                "group/member", {"groupname": group, "includeInactiveUsers": "false"}, quiet=DENIED
            )
            self._members[group] = (
                None
                if values is None
                else frozenset(v["emailAddress"].strip().lower() for v in values if v.get("emailAddress"))
            )
        return self._members[group]

    # -- holders -------------------------------------------------------------------------------

    def _holders(self, project: str, holders: list[dict], *, issue: dict | None) -> Permission | None:
        """The people ``holders`` (permission-scheme or security-level holders) stand for in
        ``project``; ``None`` when a project role among them cannot be read."""
        emails: set[str] = set()
        groups: set[str] = set()
        fields = (issue or {}).get("fields") or {}
        for holder in holders:
            kind = holder.get("type")
            if kind in PUBLIC_HOLDERS:
                return PUBLIC
            if kind == "group":
                name = (holder.get("group") or {}).get("name") or holder.get("parameter")
                if name:
                    groups.add(name)
            elif kind == "user":
                emails.add(self._email(holder.get("user") or {"accountId": holder.get("parameter") or ""}))
            elif kind == "projectLead":
                emails.add(self._email(self.projects.get(project, {}).get("lead") or {}))
            elif kind == "projectRole":
                role = self._role(project, str(holder.get("parameter") or holder.get("value") or ""))
                if role is None:
                    return None
                emails |= role[0]
                groups |= role[1]
            elif kind in ("reporter", "assignee") and issue is not None:
                emails.add(self._email(fields.get(kind) or {}))
        return Permission.of(emails=emails, groups=groups)

    def _both(self, base: Permission, level: Permission) -> Permission:
        """Those in ``base`` and in ``level``: shared groups stay groups, the rest by e-mail."""
        if base.public:
            return level
        if level.public:
            return base
        return Permission.of(emails=self._people(base) & self._people(level), groups=base.groups & level.groups)

    def _people(self, permission: Permission) -> set[str]:
        people = set(permission.emails)
        for group in permission.groups:
            people |= self.members(group) or frozenset()
        return people

    def _role(self, project: str, role_id: str) -> tuple[set[str], set[str]] | None:
        """Project role ``role_id``'s actors in ``project``: (user e-mails, group names)."""
        if (project, role_id) not in self._roles:
            role = self.connector.call(
                "project role", self.connector.client.project_role, project, role_id, quiet=DENIED
            )
            if role is None or not role_id:
                self._roles[project, role_id] = None
            else:
                emails, groups = set(), set()
                for actor in role.raw.get("actors") or []:
                    if actor.get("type") == "atlassian-group-role-actor":
                        name = (actor.get("actorGroup") or {}).get("name") or actor.get("name")
                        if name:
                            groups.add(name)
                    elif actor.get("type") == "atlassian-user-role-actor":
                        emails.add(self._email(actor.get("actorUser") or {"name": actor.get("name") or ""}))
                self._roles[project, role_id] = (emails - {""}, groups)
        return self._roles[project, role_id]

    def _level(self, level_id: str) -> list[dict] | None:
        """Security level ``level_id``'s holders (Cloud only); ``None`` when they cannot be listed."""
        if level_id not in self._levels:
            values = None
            if level_id and self.connector.cloud:
                values = self.connector.paged(
                    "issuesecurityschemes/level/member",
                    {"levelId": level_id, "expand": "user,group,projectRole"},
                    quiet=DENIED,
                )
            self._levels[level_id] = None if values is None else [v.get("holder") or {} for v in values]
        return self._levels[level_id]

    def _email(self, user: dict) -> str:
        """``user``'s e-mail address (from ``user`` itself, else ``/rest/api/2/user``), lower case;
        empty when Jira hides it or the user is gone."""
        if user.get("emailAddress"):
            return user["emailAddress"].strip().lower()
        user_id = _user_id(user)
        if not user_id:
            return ""
        if user_id not in self._emails:
            found = self.connector.call("user", self.connector.client.user, user_id, quiet=DENIED)
            raw = found.raw if found is not None else {}
            self._emails[user_id] = (raw.get("emailAddress") or "").strip().lower()
        return self._emails[user_id]
