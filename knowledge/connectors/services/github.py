"""GitHub (github.com and Enterprise Server): one document per issue or pull request, with its
comments, and who may see it.

Read with PyGithub pointed at ``source.location`` (``https://api.github.com/``, or an Enterprise
Server's ``https://HOST/api/v3``); the secret is a personal access token (fine-grained or classic).
Every request goes through the address guard, with GitHub's rate limits waited out
(``github_client``).

What is read: the repositories of ``options["repositories"]`` (``["owner/name", ...]``) and of
``options["org"]`` (every repository of that organisation the token sees). Each issue and pull
request becomes a Markdown document: title, state, labels, description, then its comments and, for
a pull request, its review comments (one more request per changed pull request). Discussions,
code, wikis and releases are not read.

* ``changes``: per repository, ``GET /repos/{repo}/issues?state=all&sort=updated&direction=asc
  &since=...`` (issues include pull requests), 100 a page, then each changed issue's comments.
  GitHub's ``since`` includes its own second, so the checkpoint (per repository, the last
  ``updated_at`` read and the numbers already read at that second) skips those.
* ``listing``: every issue's number and ``updated_at`` (the fingerprint), 100 a page; a deleted
  or transferred issue is no longer listed.
* ``permissions``: a public repository's documents are public (anyone in the tenant); a private or
  internal one's are for the group ``repo:{owner/name}``, its collaborators (GitHub counts the
  members of its teams and the organisation's base permission among them), when the token may
  list them, else nobody but the tenant's admins (fail closed).
* ``groups``: per private or internal repository, its collaborators' e-mail addresses:
  ``options["emails"]`` (``{"login": "address"}``) first, else the address on the user's public
  profile; a login with neither is left out (it gets no access).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from datetime import UTC, datetime

from github import GithubException
from github.PaginatedList import PaginatedList
from github.PullRequestComment import PullRequestComment

from core.errors import InvalidInput
from knowledge.connectors.base import PUBLIC, Item, Permission, SourceGroup, SourceUnreachable
from knowledge.connectors.services.github_client import answers, github_client, github_error, rate_limited
from knowledge.ingestion.documents import ReadDocument
from knowledge.ingestion.readers import read_bytes

KIND = "github"
SEEN_MAX = 500  # the most numbers of the boundary second a checkpoint remembers
REPOSITORY_NAME = re.compile(r"[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+")
ISO = "%Y-%m-%dT%H:%M:%SZ"


def repository_names(options: dict) -> tuple[list[str], str]:
    """``options``' repositories (``owner/name``, unique, in order) and organisation.

    ``InvalidInput`` when neither is given or a name is not ``owner/name``.
    """
    names = options.get("repositories") or []
    if isinstance(names, str):
        names = [names]
    org = str(options.get("org") or "").strip()
    if not isinstance(names, list) or not all(
        isinstance(n, str) and REPOSITORY_NAME.fullmatch(n.strip()) for n in names
    ):
        raise InvalidInput(
            'GitHub options: "repositories" is a list of "owner/name", e.g. {"repositories": ["acme/api"]}.',
            code="invalid_options",
        )
    if not names and not org:
        raise InvalidInput(
            'GitHub options need "repositories" (["owner/name", ...]) or "org" (an organisation\'s login).',
            code="invalid_options",
        )
    return list(dict.fromkeys(n.strip() for n in names)), org


def issue_key(repository: str, number: int) -> str:
    """The item key of issue ``number`` of ``repository``: ``owner/name#12``."""
    return f"{repository}#{number}"


def key_parts(key: str) -> tuple[str, int] | None:
    """``(repository, number)`` of an item key, or None for a key this connector did not make."""
    repository, _, number = key.rpartition("#")
    return (repository, int(number)) if repository and number.isdigit() else None


def iso(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime(ISO)


def checkpoint_mark(mark: dict | None) -> tuple[datetime | None, set[int]]:
    """A repository's checkpoint ``{"since": iso, "seen": [numbers]}`` read back; a missing or
    malformed one reads the repository from the start."""
    try:
        since = datetime.strptime(mark["since"], ISO).replace(tzinfo=UTC)
        return since, {int(number) for number in mark.get("seen") or []}
    except (TypeError, KeyError, ValueError, AttributeError):
        return None, set()


def is_pull_request(issue) -> bool:
    """Whether an issue of the issues API is a pull request (its web page is ``.../pull/N``; the
    ``pull_request`` field is absent from plain issues, and reading it would cost a request)."""
    return "/pull/" in (issue.html_url or "")


def public_repository(repo) -> bool:
    """Whether anyone may read ``repo`` (not private, not internal to an enterprise)."""
    visibility = (repo.visibility or "").lower()
    return visibility == "public" if visibility else not repo.private


def _posted(comment) -> str:
    login = comment.user.login if comment.user else "ghost"
    return f"@{login}, {comment.created_at:%Y-%m-%d}" if comment.created_at else f"@{login}"


def issue_markdown(repository: str, issue, comments: list, reviews: list) -> str:
    """The Markdown text of an issue or pull request: heading, a line of facts, the description,
    then ``## Comments`` and ``## Review comments`` with one ``###`` heading per comment."""
    kind = "Pull request" if is_pull_request(issue) else "Issue"
    author = issue.user.login if issue.user else "ghost"
    lines = [f"# {issue.title}", "", f"{kind} #{issue.number} in {repository}, {issue.state}, opened by @{author}."]
    labels = [label.name for label in issue.labels or []]
    if labels:
        lines.append(f"Labels: {', '.join(labels)}.")
    lines += ["", (issue.body or "").strip() or "(No description.)"]
    for heading, entries in (("Comments", comments), ("Review comments", reviews)):
        if entries:
            lines += ["", f"## {heading}"]
        for entry in entries:
            where = f" on `{entry.path}`" if heading == "Review comments" and entry.path else ""
            lines += ["", f"### {_posted(entry)}{where}", "", (entry.body or "").strip()]
    return "\n".join(lines) + "\n"


def issue_document(repository: str, issue, comments: list, reviews: list) -> ReadDocument:
    """The ``ReadDocument`` of an issue or pull request (its text from ``issue_markdown``)."""
    key = issue_key(repository, issue.number)
    text = issue_markdown(repository, issue, comments, reviews)
    document = read_bytes(text.encode(), name="issue.md", external_id=f"{KIND}/{key}", uri=issue.html_url or "")[0]
    document.title = f"{issue.title} ({key})"[:500]
    document.published_at = issue.updated_at
    document.metadata = {
        "author": issue.user.login if issue.user else "",
        "place": repository,
        "updated_at": iso(issue.updated_at),
        "source_kind": KIND,
        "type": "pull_request" if is_pull_request(issue) else "issue",
        "state": issue.state,
        "number": issue.number,
    }
    return document


class GitHubConnector:
    """A ``Connector`` for GitHub repositories' issues and pull requests (module docstring)."""

    kind = KIND
    follows_permissions = True

    def __init__(self, source, secret: str):
        options = source.options or {}
        self.names, self.org = repository_names(options)
        emails = options.get("emails") or {}
        if not isinstance(emails, dict):
            raise InvalidInput('GitHub options: "emails" maps logins to addresses, e.g. {"octocat": "o@example.com"}.')
        self.emails = {str(login).lower(): str(address) for login, address in emails.items()}
        self.client = github_client(source.location or "https://api.github.com/", secret)
        self._repos: dict[str, object] = {}
        self._readable: dict[str, bool] = {}
        self._user_emails: dict[str, str] = {}

    # -- repositories and who may read them ---------------------------------------------------------

    def _fresh(self) -> None:
        """Forget what an earlier call learnt: each call reads the source as it is now."""
        self._repos, self._readable, self._user_emails = {}, {}, {}

    def _repository(self, name: str):
        if name not in self._repos:
            with answers(f"the repository {name}"):
                self._repos[name] = self.client.get_repo(name)
        return self._repos[name]

    def repositories(self) -> list:
        """The configured repositories, each read once (``SourceUnreachable`` if one is missing)."""
        repos = {name: self._repository(name) for name in self.names}
        if self.org:
            with answers(f"the repositories of the organisation {self.org}"):
                for repo in self.client.get_organization(self.org).get_repos(type="all"):
                    self._repos.setdefault(repo.full_name, repo)
                    repos.setdefault(repo.full_name, repo)
        return list(repos.values())

    def _collaborators(self, repo, *, probe: bool = False) -> list[str] | None:
        """The logins of ``repo``'s collaborators (``affiliation=all``: team members and the
        organisation's base permission included), or None when the token may not list them (it
        needs push or admin access). ``probe``: only whether it may, with one request."""
        with answers(f"the collaborators of {repo.full_name}"):
            try:
                people = repo.get_collaborators(affiliation="all")
                logins = [user.login for user in (people.get_page(0) if probe else people)]
            except GithubException as exc:
                if exc.status not in (403, 404) or rate_limited(exc):
                    raise
                logins = None
        self._readable[repo.full_name] = logins is not None
        return logins

    def _collaborators_readable(self, repo) -> bool:
        if repo.full_name not in self._readable:
            self._collaborators(repo, probe=True)
        return self._readable[repo.full_name]

    def _permission(self, repo) -> Permission | None:
        if public_repository(repo):
            return PUBLIC
        if not self._collaborators_readable(repo):
            return None
        return Permission.of(groups=[f"repo:{repo.full_name}"])

    # -- documents ------------------------------------------------------------------------------------

    def _comments(self, repo, issue) -> tuple[list, list]:
        """An issue's comments, and a pull request's review comments (none without a request
        when the issue says it has no comments)."""
        comments = list(issue.get_comments()) if issue.comments else []
        reviews = []
        if is_pull_request(issue):
            url = f"{repo.url}/pulls/{issue.number}/comments"
            reviews = list(PaginatedList(PullRequestComment, self.client.requester, url, None))
        return comments, reviews

    def _item(self, repo, issue, permission: Permission | None) -> Item:
        """The item of ``issue``: its document with comments; an item error when GitHub fails on
        its comments alone (a 5xx after retries, or gone in between)."""
        key = issue_key(repo.full_name, issue.number)
        fingerprint = iso(issue.updated_at)
        try:
            comments, reviews = self._comments(repo, issue)
        except GithubException as exc:
            if rate_limited(exc) or (exc.status not in (404, 410) and exc.status < 500):
                raise github_error(exc, f"the comments of {key}") from exc
            error = f"its comments could not be read (GitHub answered HTTP {exc.status})"
            return Item(key=key, fingerprint=fingerprint, error=error, permission=permission)
        document = issue_document(repo.full_name, issue, comments, reviews)
        return Item(key=key, fingerprint=fingerprint, documents=[document], permission=permission)

    def _issues(self, repo, **filters) -> Iterator:
        """``repo``'s issues and pull requests (``state=all``), 100 a page; none when the
        repository has issues turned off (HTTP 410)."""
        try:
            yield from repo.get_issues(state="all", **filters)
        except GithubException as exc:
            if exc.status != 410:
                raise

    def changes(self, checkpoint: dict) -> Iterator[Item]:
        """Each issue and pull request updated since ``checkpoint`` (all when ``{}``), oldest
        first per repository; the checkpoint is ``{"repositories": {name: {"since", "seen"}}}``."""
        self._fresh()
        repos = self.repositories()
        known = (checkpoint or {}).get("repositories") or {}
        state = {repo.full_name: dict(known[repo.full_name]) for repo in repos if repo.full_name in known}
        for repo in repos:
            name = repo.full_name
            permission = self._permission(repo)
            since, seen = checkpoint_mark(state.get(name))
            filters = {"sort": "updated", "direction": "asc", **({"since": since} if since else {})}
            with answers(f"the issues of {name}"):
                for issue in self._issues(repo, **filters):
                    updated = issue.updated_at.astimezone(UTC).replace(microsecond=0)
                    if since is not None and updated == since and issue.number in seen:
                        continue
                    if updated != since:
                        since, seen = updated, set()
                    if len(seen) < SEEN_MAX:
                        seen.add(issue.number)
                    item = self._item(repo, issue, permission)
                    state[name] = {"since": iso(since), "seen": sorted(seen)}
                    item.checkpoint = {"repositories": {k: dict(v) for k, v in state.items()}}
                    yield item

    def listing(self) -> Iterator[tuple[str, str]]:
        """``(key, updated_at)`` of every issue and pull request of the configured repositories."""
        self._fresh()
        for repo in self.repositories():
            with answers(f"the issues of {repo.full_name}"):
                for issue in self._issues(repo, sort="created", direction="asc"):
                    yield issue_key(repo.full_name, issue.number), iso(issue.updated_at)

    def fetch(self, keys: list[str]) -> Iterator[Item]:
        """Each of ``keys`` read again; ``deleted=True`` for an issue GitHub no longer has there
        (deleted, or transferred to another repository)."""
        self._fresh()
        for key in keys:
            parts = key_parts(key)
            if parts is None:
                yield Item(key=key, deleted=True)
                continue
            repo = self._repository(parts[0])
            with answers(f"the issue {key}"):
                try:
                    issue = repo.get_issue(parts[1])
                except GithubException as exc:
                    if exc.status not in (404, 410):
                        raise
                    issue = None
                moved = issue is not None and not (issue.html_url or "").startswith(f"{repo.html_url}/")
                item = (
                    Item(key=key, deleted=True)
                    if issue is None or moved
                    else self._item(repo, issue, self._permission(repo))
                )
            yield item

    def permissions(self, keys: list[str]) -> Iterator[tuple[str, Permission | None]]:
        """``(key, permission)`` per key: by its repository's visibility (module docstring); None
        when the repository cannot be read any more or its collaborators cannot be listed."""
        self._fresh()
        for key in keys:
            parts = key_parts(key)
            if parts is None:
                yield key, None
                continue
            try:
                repo = self._repository(parts[0])
            except SourceUnreachable as exc:
                if exc.code != "not_found":
                    raise
                yield key, None
                continue
            yield key, self._permission(repo)

    # -- groups and people ----------------------------------------------------------------------------

    def _email(self, login: str) -> str:
        """``login``'s address: ``options["emails"]``, else the user's public e-mail, else ""."""
        if login.lower() in self.emails:
            return self.emails[login.lower()]
        if login not in self._user_emails:
            with answers(f"the user {login}"):
                try:
                    self._user_emails[login] = self.client.get_user(login).email or ""
                except GithubException as exc:
                    if exc.status != 404:
                        raise
                    self._user_emails[login] = ""
        return self._user_emails[login]

    def groups(self) -> Iterator[SourceGroup]:
        """Per private or internal repository whose collaborators the token may list: the group
        ``repo:{name}`` (``github:{name}`` in the product) with their e-mail addresses."""
        self._fresh()
        for repo in self.repositories():
            logins = None if public_repository(repo) else self._collaborators(repo)
            if logins is None:
                continue
            emails = [self._email(login) for login in logins]
            yield SourceGroup(
                external_id=f"repo:{repo.full_name}",
                name=f"github:{repo.full_name}",
                emails=Permission.of(emails=emails).emails,
            )

    def check(self) -> str:
        """One line: who the token is, the repositories it reads and what their permissions allow."""
        self._fresh()
        with answers("the token's user"):
            try:
                login = self.client.get_user().login
            except GithubException as exc:
                if exc.status != 403:  # an app's installation token has no user
                    raise
                login = "an app installation"
        repos = self.repositories()
        private = [repo for repo in repos if not public_repository(repo)]
        readable = sum(1 for repo in private if self._collaborators_readable(repo))
        names = ", ".join(repo.full_name for repo in repos[:5]) + (", ..." if len(repos) > 5 else "")
        return (
            f"Signed in as {login}: {len(repos):,} repositories ({len(private):,} private or internal, "
            f"collaborators readable in {readable:,} of them): {names}"
        )
