"""A stand-in for GitHub's REST API (v3), as the GitHub connector reads it, from GitHub's public
REST reference (docs.github.com/en/rest):

* ``GET /user``, ``GET /users/{login}`` (``email`` is null when the user hides it);
* ``GET /repos/{owner}/{repo}``, ``GET /orgs/{org}``, ``GET /orgs/{org}/repos``;
* ``GET /repos/{owner}/{repo}/issues`` (issues and pull requests: ``state`` open by default,
  ``sort`` created|updated|comments, ``direction`` desc by default, ``since`` inclusive),
  ``GET .../issues/{number}`` (410 for a deleted issue), ``GET .../issues/{number}/comments``,
  ``GET .../pulls/{number}/comments`` (review comments);
* ``GET /repos/{owner}/{repo}/collaborators`` (403 without push access).

Lists are paginated as GitHub does: ``per_page`` (30 by default, at most 100) and ``page``, with a
``Link`` header (``next``, ``last``, ``first``, ``prev``). Every answer carries ``X-RateLimit-*``
headers; ``rate_limit_next("secondary")`` answers the next request 403 with ``Retry-After``,
``rate_limit_next("primary")`` 403 with ``X-RateLimit-Remaining: 0``; ``fail_next(429)`` and
``fail_next(500)`` come from the base; a revoked token gets 401 "Bad credentials".

Times come from ``clock``, which every change moves one minute on, so ``updated_at`` values are
distinct and ascending.
"""

from __future__ import annotations

import itertools
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from urllib.parse import urlencode

from tests.connectors.standin import Request, StandIn, route

WEB = "https://github.com"
DEFAULT_PAGE, MAX_PAGE = 30, 100
RATE_LIMIT = 5000


def stamp(moment: datetime | None) -> str | None:
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ") if moment else None


@dataclass
class Comment:
    id: int
    author: str
    body: str
    created_at: datetime
    updated_at: datetime
    path: str = ""  # review comments: the file commented on


@dataclass
class Issue:
    number: int
    title: str
    body: str
    author: str
    pull: bool
    created_at: datetime
    updated_at: datetime
    state: str = "open"
    labels: list[str] = field(default_factory=list)
    comments: list[Comment] = field(default_factory=list)
    reviews: list[Comment] = field(default_factory=list)
    deleted: bool = False


@dataclass
class Repo:
    full_name: str
    id: int
    visibility: str  # public, private or internal
    collaborators: list[str] = field(default_factory=list)
    collaborators_readable: bool = True  # False: the token lacks push access
    issues: dict[int, Issue] = field(default_factory=dict)


class GitHubStandIn(StandIn):
    """GitHub's REST API on loopback (module docstring)."""

    token = "ghp_standin0123456789"

    def __init__(self):
        super().__init__()
        self.login = "kb-reader"
        self.clock = datetime(2024, 3, 1, 9, 0, tzinfo=UTC)
        self.repos: dict[str, Repo] = {}
        self.users: dict[str, str | None] = {}
        self._ids = itertools.count(1000)
        self._rate_limits: list[str] = []
        self._remaining = RATE_LIMIT

    # -- what tests change ---------------------------------------------------------------------------

    def tick(self) -> datetime:
        self.clock += timedelta(minutes=1)
        return self.clock

    def add_user(self, login: str, email: str | None = None) -> None:
        """A GitHub user; ``email`` is their public address (None: hidden, as is the default)."""
        self.users[login] = email

    def add_repo(self, full_name: str, *, visibility: str = "public", collaborators=(), readable=True) -> Repo:
        repo = Repo(full_name, next(self._ids), visibility, list(collaborators), readable)
        self.repos[full_name] = repo
        for login in collaborators:
            self.users.setdefault(login, None)
        return repo

    def add_issue(self, full_name: str, title: str, body: str = "", *, author="alice", pull=False, labels=()) -> int:
        """A new issue (or pull request, ``pull=True``) numbered after the repository's last one."""
        repo = self.repos[full_name]
        number = max(repo.issues, default=0) + 1
        now = self.tick()
        repo.issues[number] = Issue(number, title, body, author, pull, now, now, labels=list(labels))
        self.users.setdefault(author, None)
        return number

    def edit_issue(self, full_name: str, number: int, *, title=None, body=None, state=None) -> None:
        issue = self.repos[full_name].issues[number]
        issue.title = issue.title if title is None else title
        issue.body = issue.body if body is None else body
        issue.state = issue.state if state is None else state
        issue.updated_at = self.tick()

    def comment(self, full_name: str, number: int, body: str, *, author="bob", path: str = "") -> None:
        """A comment on an issue, or a review comment on ``path`` of a pull request when ``path``."""
        issue = self.repos[full_name].issues[number]
        now = self.tick()
        (issue.reviews if path else issue.comments).append(Comment(next(self._ids), author, body, now, now, path))
        issue.updated_at = now
        self.users.setdefault(author, None)

    def delete_issue(self, full_name: str, number: int) -> None:
        self.repos[full_name].issues[number].deleted = True

    def remove_collaborator(self, full_name: str, login: str) -> None:
        self.repos[full_name].collaborators.remove(login)

    def rate_limit_next(self, kind: str = "secondary", *, wait: int = 1) -> None:
        """Answer the next request with GitHub's 403 for a ``secondary`` rate limit (``Retry-After:
        wait``) or a spent ``primary`` one (``X-RateLimit-Remaining: 0``, the reset ``wait`` seconds
        away, counted as GitHub's clients do: the reset second, plus one)."""
        self._rate_limits.append(f"{kind}:{wait}")

    # -- the protocol --------------------------------------------------------------------------------

    def authorized(self, request: Request) -> bool:
        header = request.headers.get("Authorization", "")
        return header in (f"token {self.token}", f"Bearer {self.token}")

    def unauthorized(self, request: Request):
        return 401, {"message": "Bad credentials", "documentation_url": "https://docs.github.com/rest", "status": "401"}

    def _answer(self, handler) -> None:
        with self._lock:
            limited = self._rate_limits.pop(0) if self._rate_limits else None
            if limited is not None:
                self.requests.append((handler.command, handler.path.split("?")[0]))
        if limited is None:
            super()._answer(handler)
            return
        kind, wait = limited.split(":")
        if kind == "primary":
            headers = {"X-RateLimit-Remaining": "0", "X-RateLimit-Reset": str(int(time.time()) + int(wait) - 1)}
            message = "API rate limit exceeded for user ID 1."
        else:
            headers = {"Retry-After": wait}
            message = "You have exceeded a secondary rate limit. Please wait a few minutes before you try again."
        handler.rfile.read(int(handler.headers.get("Content-Length") or 0))
        self._send(handler, 403, {"message": message, "documentation_url": "https://docs.github.com/rest"}, headers)

    def _send(self, handler, status: int, body, headers: dict) -> None:
        with self._lock:
            self._remaining = max(self._remaining - 1, 0)
            remaining = self._remaining
        limits = {
            "X-RateLimit-Limit": str(RATE_LIMIT),
            "X-RateLimit-Remaining": str(remaining),
            "X-RateLimit-Used": str(RATE_LIMIT - remaining),
            "X-RateLimit-Reset": str(int(time.time()) + 3600),
            "X-RateLimit-Resource": "core",
        }
        StandIn._send(handler, status, body, {**limits, **headers})

    def _page(self, request: Request, path: str, items: list):
        """One page of ``items`` with GitHub's ``Link`` header (``page`` from 1)."""
        per_page = min(max(int(request.arg("per_page", DEFAULT_PAGE)), 1), MAX_PAGE)
        page = max(int(request.arg("page", 1)), 1)
        last = max((len(items) + per_page - 1) // per_page, 1)
        query = {k: v[0] for k, v in request.query.items() if k not in ("page", "per_page")}

        def link(number: int) -> str:
            return f"{self.url}{path.lstrip('/')}?{urlencode({**query, 'per_page': per_page, 'page': number})}"

        rels = []
        if page < last:
            rels += [f'<{link(page + 1)}>; rel="next"', f'<{link(last)}>; rel="last"']
        if page > 1:
            rels += [f'<{link(1)}>; rel="first"', f'<{link(page - 1)}>; rel="prev"']
        headers = {"Link": ", ".join(rels)} if rels else {}
        return 200, items[(page - 1) * per_page : page * per_page], headers

    # -- JSON shapes ---------------------------------------------------------------------------------

    def user_json(self, login: str) -> dict:
        return {
            "login": login,
            "id": abs(hash(login)) % 10**7,
            "node_id": f"U_{login}",
            "avatar_url": f"https://avatars.githubusercontent.com/{login}",
            "url": f"{self.url}users/{login}",
            "html_url": f"{WEB}/{login}",
            "type": "User",
            "site_admin": False,
        }

    def repo_json(self, repo: Repo) -> dict:
        owner = repo.full_name.split("/")[0]
        return {
            "id": repo.id,
            "node_id": f"R_{repo.id}",
            "name": repo.full_name.split("/")[1],
            "full_name": repo.full_name,
            "private": repo.visibility != "public",
            "visibility": repo.visibility,
            "owner": {**self.user_json(owner), "type": "Organization"},
            "html_url": f"{WEB}/{repo.full_name}",
            "url": f"{self.url}repos/{repo.full_name}",
            "issues_url": f"{self.url}repos/{repo.full_name}/issues{{/number}}",
            "has_issues": True,
            "archived": False,
            "default_branch": "main",
            "permissions": {"admin": False, "push": repo.collaborators_readable, "pull": True},
        }

    def issue_json(self, repo: Repo, issue: Issue) -> dict:
        api = f"{self.url}repos/{repo.full_name}"
        page = f"{WEB}/{repo.full_name}/{'pull' if issue.pull else 'issues'}/{issue.number}"
        data = {
            "id": repo.id * 10000 + issue.number,
            "node_id": f"I_{repo.id}_{issue.number}",
            "url": f"{api}/issues/{issue.number}",
            "repository_url": api,
            "comments_url": f"{api}/issues/{issue.number}/comments",
            "html_url": page,
            "number": issue.number,
            "state": issue.state,
            "title": issue.title,
            "body": issue.body or None,
            "user": self.user_json(issue.author),
            "labels": [{"id": i, "name": name, "color": "ededed"} for i, name in enumerate(issue.labels)],
            "assignee": None,
            "assignees": [],
            "milestone": None,
            "locked": False,
            "comments": len(issue.comments),
            "created_at": stamp(issue.created_at),
            "updated_at": stamp(issue.updated_at),
            "closed_at": stamp(issue.updated_at) if issue.state == "closed" else None,
            "author_association": "MEMBER",
        }
        if issue.pull:
            data["pull_request"] = {"url": f"{api}/pulls/{issue.number}", "html_url": page, "merged_at": None}
        return data

    def comment_json(self, repo: Repo, issue: Issue, comment: Comment) -> dict:
        api = f"{self.url}repos/{repo.full_name}"
        data = {
            "id": comment.id,
            "node_id": f"C_{comment.id}",
            "body": comment.body,
            "user": self.user_json(comment.author),
            "created_at": stamp(comment.created_at),
            "updated_at": stamp(comment.updated_at),
            "author_association": "MEMBER",
        }
        if comment.path:
            page = f"{WEB}/{repo.full_name}/pull/{issue.number}#discussion_r{comment.id}"
            return {
                **data,
                "url": f"{api}/pulls/comments/{comment.id}",
                "html_url": page,
                "path": comment.path,
                "diff_hunk": "@@ -1 +1 @@",
                "pull_request_url": f"{api}/pulls/{issue.number}",
            }
        page = f"{WEB}/{repo.full_name}/issues/{issue.number}#issuecomment-{comment.id}"
        return {
            **data,
            "url": f"{api}/issues/comments/{comment.id}",
            "html_url": page,
            "issue_url": f"{api}/issues/{issue.number}",
        }

    # -- routes --------------------------------------------------------------------------------------

    def _repo(self, owner: str, name: str) -> Repo | None:
        return self.repos.get(f"{owner}/{name}")

    def _issue(self, owner: str, name: str, number: str) -> tuple[Repo | None, Issue | None]:
        repo = self._repo(owner, name)
        return repo, (repo.issues.get(int(number)) if repo else None)

    @route("GET", r"/user")
    def get_authenticated_user(self, request):
        return 200, {**self.user_json(self.login), "email": None}

    @route("GET", r"/users/([^/]+)")
    def get_user(self, request, login):
        if login not in self.users:
            return self.not_found(request)
        return 200, {**self.user_json(login), "name": login.title(), "email": self.users[login]}

    @route("GET", r"/orgs/([^/]+)")
    def get_org(self, request, org):
        if not any(name.startswith(f"{org}/") for name in self.repos):
            return self.not_found(request)
        return 200, {"login": org, "id": 1, "url": f"{self.url}orgs/{org}", "repos_url": f"{self.url}orgs/{org}/repos"}

    @route("GET", r"/orgs/([^/]+)/repos")
    def list_org_repos(self, request, org):
        repos = [self.repo_json(r) for name, r in sorted(self.repos.items()) if name.startswith(f"{org}/")]
        return self._page(request, request.path, repos)

    @route("GET", r"/repos/([^/]+)/([^/]+)")
    def get_repo(self, request, owner, name):
        repo = self._repo(owner, name)
        return (200, self.repo_json(repo)) if repo else self.not_found(request)

    @route("GET", r"/repos/([^/]+)/([^/]+)/issues")
    def list_issues(self, request, owner, name):
        repo = self._repo(owner, name)
        if repo is None:
            return self.not_found(request)
        issues = [i for i in repo.issues.values() if not i.deleted]
        state = request.arg("state", "open")
        if state != "all":
            issues = [i for i in issues if i.state == state]
        since = request.arg("since")
        if since:
            moment = datetime.strptime(since, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC)
            issues = [i for i in issues if i.updated_at >= moment]
        sort = request.arg("sort", "created")
        order = {"created": lambda i: i.created_at, "updated": lambda i: i.updated_at}.get(
            sort, lambda i: len(i.comments)
        )
        issues.sort(key=order, reverse=request.arg("direction", "desc") == "desc")
        return self._page(request, request.path, [self.issue_json(repo, i) for i in issues])

    @route("GET", r"/repos/([^/]+)/([^/]+)/issues/(\d+)")
    def get_issue(self, request, owner, name, number):
        repo, issue = self._issue(owner, name, number)
        if issue is None:
            return self.not_found(request)
        if issue.deleted:
            return 410, {"message": "This issue was deleted", "documentation_url": "https://docs.github.com/rest"}
        return 200, self.issue_json(repo, issue)

    @route("GET", r"/repos/([^/]+)/([^/]+)/issues/(\d+)/comments")
    def list_issue_comments(self, request, owner, name, number):
        repo, issue = self._issue(owner, name, number)
        if issue is None or issue.deleted:
            return self.not_found(request)
        return self._page(request, request.path, [self.comment_json(repo, issue, c) for c in issue.comments])

    @route("GET", r"/repos/([^/]+)/([^/]+)/pulls/(\d+)/comments")
    def list_review_comments(self, request, owner, name, number):
        repo, issue = self._issue(owner, name, number)
        if issue is None or issue.deleted or not issue.pull:
            return self.not_found(request)
        return self._page(request, request.path, [self.comment_json(repo, issue, c) for c in issue.reviews])

    @route("GET", r"/repos/([^/]+)/([^/]+)/collaborators")
    def list_collaborators(self, request, owner, name):
        repo = self._repo(owner, name)
        if repo is None:
            return self.not_found(request)
        if not repo.collaborators_readable:
            return 403, {
                "message": "Must have push access to view repository collaborators.",
                "documentation_url": "https://docs.github.com/rest/collaborators/collaborators",
            }
        people = [{**self.user_json(login), "role_name": "write"} for login in repo.collaborators]
        return self._page(request, request.path, people)
