"""When each file of a git commit got its content: the committer dates that become documents'
``published_at`` (``knowledge.connectors.git``)."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime

from dulwich.diff_tree import tree_changes
from dulwich.objects import Commit
from dulwich.repo import Repo


def commit_dates(repo: Repo, tip: bytes, wanted: Mapping[bytes, bytes]) -> dict[bytes, datetime]:
    """When each path of ``wanted`` (path -> its blob id at ``tip``) got that content.

    Returns path -> the committer date (UTC) of the newest commit, walking back from ``tip``,
    whose tree has the path with that blob while none of its parents' trees does (so a file
    merged from another branch keeps the date of its commit there). The walk compares each
    commit's tree with its parents' (identical subtrees are skipped) and ends once every path is
    dated. A shallow history's oldest commits count as having no parents; a path the walk cannot
    date (a damaged history) is missing from the result.
    """
    pending = dict(wanted)
    dates: dict[bytes, datetime] = {}
    if not pending:
        return dates
    store = repo.object_store
    try:
        for entry in repo.get_walker(include=[tip]):
            commit: Commit = entry.commit
            parents = repo.get_parents(commit.id, commit)  # none at a shallow history's edge
            parent_trees: list[bytes | None] = [store[parent].tree for parent in parents] or [None]
            introduced: set[bytes] | None = None
            for parent_tree in parent_trees:
                changed = {
                    change.new.path
                    for change in tree_changes(store, parent_tree, commit.tree)
                    if change.new is not None
                    and change.new.path in pending
                    and change.new.sha == pending[change.new.path]
                }
                introduced = changed if introduced is None else introduced & changed
                if not introduced:
                    break
            for path in introduced or ():
                dates[path] = datetime.fromtimestamp(commit.commit_time, tz=UTC)
                del pending[path]
            if not pending:
                break
    except KeyError:  # a missing commit or tree: what is dated so far stands
        pass
    return dates
