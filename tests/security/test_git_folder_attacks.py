"""Folder and git sources that reach across the tenant boundary through the server's own files: the
workers' git configuration, a granted folder swapped for a link, a repository swapped after its
checks, a hard link to another tenant's upload, and a git blob that inflates a thousandfold.

Each attack (``ATTACKS``) is sent as a tenant admin would, through the REST API, together with what
that admin can do in the share the operator granted to their tenant (commit files, make links,
swap folders). With every guard on it is refused, says why, and nothing of the victim's reaches
the attacker's tenant (or the reader); with its own guard switched off (``GUARDS``) the same
attack gets through, which shows each test can fail. Every outcome is a row of the probe table
(``tests/security/probe_table.py``).

The world: tenant ``acme`` (the attacker, an admin with an API token) and tenant ``bolt`` (the
victim): bolt's uploaded minutes in the data directory's ``uploads/``, its private repository in
the git cache, its granted folder ``bolt-share``; acme's granted share with a repository of its
own; a loopback dumb-HTTP git server serving acme's repository (the operator's
``KB_FETCH_ALLOWED_NETWORKS`` opens 127.0.0.1 here, standing for a public host); and a ``HOME``
of the test's own, whose ``.gitconfig`` stands for the workers' git configuration.
"""

from __future__ import annotations

import importlib
import io
import os
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from django.apps import apps
from django.core.management import call_command
from dulwich import porcelain
from dulwich.config import ConfigDict, StackedConfig
from dulwich.repo import Repo

from core.errors import InvalidInput
from core.models import AuditEvent
from knowledge.connectors import folder as folder_connector
from knowledge.connectors import git as git_connector
from knowledge.connectors.folder import LinkedFile, file_links_check
from knowledge.connectors.git_objects import ObjectSizes
from knowledge.folder_grants import path_real
from knowledge.models import FolderGrant, SyncRun
from knowledge.services import sources as source_services
from tests.factories import folder_granted
from tests.knowledge.web_site import WebSite
from tests.security.probe_table import probe_record
from tests.security.source_world import (
    MINUTES,
    PRIVATE,
    Outcome,
    Tree,
    attacker_and_victim,
    attacker_sync,
    dumb_http_pages,
    leaked_into,
    run_message,
)

MiB = 2**20
NOTES = "boltsharemarker: the salary bands for next year."
HANDBOOK = "acmehandbookmarker: expenses are filed within thirty days."


@dataclass
class World:
    """The attacker's API client and tenant, the victim's files, acme's share and the git server."""

    client: object
    acme: object
    bolt: object
    share: Path
    handbook: Path
    bolt_share: Path
    uploads: Path
    bolt_cache: Path
    home: Path
    git_site: WebSite
    settings: object
    monkeypatch: pytest.MonkeyPatch
    handed: list[tuple[str, int]] = field(default_factory=list)  # (file, bytes) the git reader was handed


@pytest.fixture
def world(db, settings, tmp_path, monkeypatch):
    settings.KB_FETCH_ALLOWED_NETWORKS = ["127.0.0.1/32"]  # the loopback git server stands for a public host
    # The workers' git configuration: a HOME of the test's own, and nothing from the machine's.
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(home / ".config"))
    monkeypatch.setenv("GIT_CONFIG_NOSYSTEM", "1")
    for name in ("GIT_CONFIG_GLOBAL", "GIT_CONFIG_SYSTEM", "GIT_CONFIG_COUNT"):
        monkeypatch.delenv(name, raising=False)
    tenants = attacker_and_victim(settings, tmp_path)

    # bolt's own grant, beside its upload and its fetched private repository.
    bolt_share = folder_granted(tenants.bolt, tmp_path / "bolt-share")
    (bolt_share / "salaries.md").write_text(f"# Salaries\n\n{NOTES}\n")

    # acme's granted share: a note and a repository of its own, also served over (dumb) HTTP.
    share = folder_granted(tenants.acme, tmp_path / "acme-share")
    (share / "welcome.md").write_text("# Welcome\n\nThe share of the acme team.\n")
    handbook = Tree(share / "handbook", {"handbook.md": f"# Handbook\n\n{HANDBOOK}\n"}).path
    bare = tmp_path / "handbook.git"
    porcelain.clone(str(handbook), str(bare), bare=True, errstream=io.BytesIO()).close()
    git_site = WebSite(dumb_http_pages(bare)).start()
    yield World(
        tenants.client,
        tenants.acme,
        tenants.bolt,
        share,
        handbook,
        bolt_share,
        tenants.uploads,
        tenants.bolt_cache,
        home,
        git_site,
        settings,
        monkeypatch,
    )
    git_site.close()


# --- Outcomes ---------------------------------------------------------------------------------------


def _create(world: World, body: dict) -> int:
    response = world.client.post("/api/v1/sources/", {"name": "attack", **body}, format="json")
    assert response.status_code == 201, response.content
    return response.json()["id"]


def _attack(world: World, body: dict, marker: str) -> Outcome:
    """POST ``body`` as a new source, sync it, and look for ``marker`` in the attacker's tenant."""
    run = attacker_sync(world, _create(world, body))
    return Outcome(201, run=run, message=run_message(run), leaked=leaked_into(world.acme, marker))


def _reader_watched(world: World) -> None:
    """Record what the git connector hands the reader; a file over the parse cap is then refused
    here (the reader would have to hold it all), so a test never embeds megabytes of zeros."""
    real = git_connector.read_bytes
    cap = world.settings.KB_PARSE_MAX_UNPACKED_MB * MiB

    def watched(data, *, name, **kwargs):
        world.handed.append((name, len(data)))
        if len(data) > cap:
            raise InvalidInput(f"{name}: {len(data):,} bytes handed to the reader.", code="document_too_large")
        return real(data, name=name, **kwargs)

    world.monkeypatch.setattr(git_connector, "read_bytes", watched)


# --- The attacks --------------------------------------------------------------------------------------


def git_remote_rewritten_by_the_workers_gitconfig(w):
    """The workers' ~/.gitconfig rewrites the checked http(s) remote to bolt's cached repository."""
    location = w.git_site.url("/repo.git")
    (w.home / ".gitconfig").write_text(f'[url "file://{w.bolt_cache}"]\n\tinsteadOf = {location}\n')
    outcome = _attack(w, {"kind": "git", "location": location}, PRIVATE)
    if not outcome.leaked and outcome.run.status == "done":
        outcome.message = f"fetched from {location.replace(str(w.git_site.port), 'PORT')} as checked"
    return outcome


def git_remote_rewritten_to_ssh_by_the_workers_gitconfig(w):
    """The workers' ~/.gitconfig turns the remote into ssh (the server's own keys): "through" when the
    fetch went anywhere but the checked server."""
    with socket.socket() as probe:  # a port that nothing listens on: ssh fails at once
        probe.bind(("127.0.0.1", 0))
        closed = probe.getsockname()[1]
    location = w.git_site.url("/repo.git")
    (w.home / ".gitconfig").write_text(f'[url "ssh://git@127.0.0.1:{closed}/"]\n\tinsteadOf = {w.git_site.url("/")}\n')
    run = attacker_sync(w, _create(w, {"kind": "git", "location": location}))
    went_elsewhere = w.git_site.connections == 0
    message = run_message(run) or f"fetched from {location.replace(str(w.git_site.port), 'PORT')} as checked"
    return Outcome(201, run=run, message=message, leaked=went_elsewhere)


def folder_whose_granted_folder_became_a_link(w):
    """Synced once, then acme's granted share is replaced by a link to bolt's folder."""
    source_id = _create(w, {"kind": "folder", "location": str(w.share)})
    assert attacker_sync(w, source_id).status == "done"
    w.share.rename(w.share.with_name("acme-share-before"))
    w.share.symlink_to(w.bolt_share, target_is_directory=True)
    run = attacker_sync(w, source_id)
    return Outcome(201, run=run, message=run_message(run), leaked=leaked_into(w.acme, NOTES))


def _swapped_after_open(w, swap: Callable[[], None]) -> None:
    """Run ``swap`` once the git connector has opened (and checked) the local repository."""
    opener = git_connector.local_repository_open

    def opened_then_swapped(**kwargs):
        opened = opener(**kwargs)
        swap()
        return opened

    w.monkeypatch.setattr(git_connector, "local_repository_open", opened_then_swapped)


def git_repository_swapped_for_a_link_after_its_checks(w):
    """acme's repository passes every check, then its .git becomes a link to bolt's cached repository."""
    source_id = _create(w, {"kind": "git", "location": str(w.handbook)})
    control = w.handbook / ".git"

    def swap():
        control.rename(w.handbook / ".git-before")
        control.symlink_to(w.bolt_cache, target_is_directory=True)

    _swapped_after_open(w, swap)
    run = attacker_sync(w, source_id)
    leaked = leaked_into(w.acme, PRIVATE)
    message = run_message(run) or (
        "read bolt's repository through the link" if leaked else "read the repository checked"
    )
    return Outcome(201, run=run, message=message, leaked=leaked)


def folder_with_a_hard_link_to_another_tenants_upload(w):
    os.link(w.uploads / "bolt" / "0f" / "minutes.md", w.share / "minutes.md")
    return _attack(w, {"kind": "folder", "location": str(w.share)}, MINUTES)


def _bomb(path: Path, size: int = 8 * MiB) -> Path:
    """A repository whose ``bomb.txt`` is ``size`` zeros (about 8 KB stored), beside a small note."""
    return Tree(path, {"bomb.txt": "0" * size, "note.md": "# Note\n\nA small note.\n"}).path


def _bomb_outcome(w, run: SyncRun) -> Outcome:
    largest = max((size for name, size in w.handed if name == "bomb.txt"), default=0)
    return Outcome(
        201,
        run=run,
        message=run_message(run),
        leaked=largest > w.settings.KB_PARSE_MAX_UNPACKED_MB * MiB,
        handed_mb=round(largest / MiB, 1),
    )


def git_blob_that_inflates_a_thousandfold(w):
    """A local repository in acme's share: 8 MB of zeros stored in about 8 KB, the cap 1 MB."""
    w.settings.KB_PARSE_MAX_UNPACKED_MB = 1
    _reader_watched(w)
    bombs = _bomb(w.share / "bombs")
    return _bomb_outcome(w, attacker_sync(w, _create(w, {"kind": "git", "location": str(bombs)})))


def git_blob_that_inflates_a_thousandfold_over_http(w):
    """The same blob in a pack, fetched from the git server (``KB_GIT_MAX_MB`` counts its 8 KB)."""
    w.settings.KB_PARSE_MAX_UNPACKED_MB = 1
    _reader_watched(w)
    bare = w.share.parent / "bombs.git"
    porcelain.clone(str(_bomb(w.share.parent / "bombs")), str(bare), bare=True, errstream=io.BytesIO()).close()
    w.git_site.pages.clear()
    w.git_site.pages.update(dumb_http_pages(bare))
    return _bomb_outcome(w, attacker_sync(w, _create(w, {"kind": "git", "location": w.git_site.url("/repo.git")})))


@dataclass(frozen=True)
class Attack:
    run: Callable[[World], Outcome]
    guard: str  # the GUARDS entry whose absence lets it through


ATTACKS = [
    Attack(git_remote_rewritten_by_the_workers_gitconfig, "gitconfig"),
    Attack(git_remote_rewritten_to_ssh_by_the_workers_gitconfig, "gitconfig"),
    Attack(folder_whose_granted_folder_became_a_link, "pins"),
    Attack(git_repository_swapped_for_a_link_after_its_checks, "descriptors"),
    Attack(folder_with_a_hard_link_to_another_tenants_upload, "hard links"),
    Attack(git_blob_that_inflates_a_thousandfold, "blob caps"),
    Attack(git_blob_that_inflates_a_thousandfold_over_http, "blob caps"),
]
IDS = [attack.run.__name__ for attack in ATTACKS]


# --- The guards, and switching each off ---------------------------------------------------------------


def _gitconfig_off(monkeypatch):
    """dulwich reads the workers' git configuration again, and any client it makes is used."""

    def workers_config():
        config = StackedConfig.default()
        fallback = ConfigDict()
        fallback.set((b"http",), b"timeout", b"60")
        config.backends.append(fallback)
        return config

    monkeypatch.setattr(git_connector, "_transport_config", workers_config)
    monkeypatch.setattr(git_connector, "_transport_check", lambda location, client, path: None)


def _grants_resolved_again(*, tenant, location):
    """The location check without pins: each grant resolved again, so a grant follows a link."""
    real = path_real(location)
    tenant_id = tenant if isinstance(tenant, int) else tenant.pk
    for granted in FolderGrant.objects.filter(tenant_id=tenant_id).values_list("path", flat=True):
        if real.is_relative_to(Path(granted).resolve()):
            return real
    raise InvalidInput(f"{location} is not inside a folder granted to this tenant.", code="location_not_allowed")


def _pins_off(monkeypatch):
    for module in (source_services, folder_connector, git_connector):
        monkeypatch.setattr(module, "folder_location_check", _grants_resolved_again)


class _OpenedByPath:
    """A local repository opened by its path, as dulwich does when handed one."""

    def __init__(self, repo: Repo):
        self.repo, self.grant = repo, None

    def tip(self, branch: str) -> bytes:
        return self.repo.refs[f"refs/heads/{branch}".encode() if branch else b"HEAD"]

    def close(self) -> None:
        self.repo.close()


def _descriptors_off(monkeypatch):
    """Local repositories checked by path, then opened by path (every read follows the path again)."""

    def opened_by_path(*, tenant_id, path, shown, granted):
        repo = Repo(str(path))
        for folder in (repo.controldir(), repo.object_store.path):
            granted(str(folder))
        return _OpenedByPath(repo)

    monkeypatch.setattr(git_connector, "local_repository_open", opened_by_path)


def _hard_links_off(monkeypatch):
    monkeypatch.setattr(folder_connector, "file_links_check", lambda info, *, grant: None)


def _blob_caps_off(monkeypatch):
    monkeypatch.setattr(git_connector, "_blob_refusal", lambda path, sizes, blob_id: "")


GUARDS = {
    "gitconfig": _gitconfig_off,
    "pins": _pins_off,
    "descriptors": _descriptors_off,
    "hard links": _hard_links_off,
    "blob caps": _blob_caps_off,
}


# --- The probes ---------------------------------------------------------------------------------------


def _recorded(attack: Attack, outcome: Outcome, guard: str, world: World) -> Outcome:
    what = f"{outcome.status}, run {outcome.run.status}" if outcome.run is not None else f"{outcome.status}"
    if outcome.handed_mb is not None:
        what += f", the reader got {outcome.handed_mb} MB of it"
    probe_record(
        attack=attack.run.__name__.replace("_", " "),
        guard=guard,
        outcome=what + (", LEAKED" if outcome.leaked else ""),
        detail=outcome.message.replace(str(world.share.parent), "<tmp>").replace(str(world.git_site.port), "PORT"),
    )
    return outcome


@pytest.mark.parametrize("attack", ATTACKS, ids=IDS)
def test_every_attack_is_refused_and_nothing_of_the_victims_gets_through(world, attack):
    outcome = _recorded(attack, attack.run(world), "on", world)

    assert outcome.refused, (outcome.status, outcome.message)
    assert not outcome.leaked, outcome.message
    assert outcome.message
    if outcome.run.status == "failed":
        assert "Nothing changed" in outcome.message
    for words in ("Errno", "Traceback", "unexpectedly"):
        assert words not in outcome.message


@pytest.mark.parametrize("attack", ATTACKS, ids=IDS)
def test_every_attack_gets_through_when_its_guard_is_switched_off(world, attack, monkeypatch):
    GUARDS[attack.guard](monkeypatch)

    outcome = _recorded(attack, attack.run(world), f"{attack.guard} off", world)

    assert outcome.leaked, (outcome.status, outcome.message)


# --- The workers' git configuration -------------------------------------------------------------------


def test_a_gitconfig_rewrite_leaves_the_sync_where_the_location_says(world):
    outcome = git_remote_rewritten_by_the_workers_gitconfig(world)

    assert (outcome.run.status, outcome.run.new) == ("done", 1), outcome.message
    assert leaked_into(world.acme, HANDBOOK)
    assert world.git_site.connections > 0


def test_git_config_from_the_environment_is_not_read_either(world, monkeypatch):
    location = world.git_site.url("/repo.git")
    config = world.home / "elsewhere.gitconfig"
    config.write_text(f'[url "file://{world.bolt_cache}"]\n\tinsteadOf = {location}\n')
    monkeypatch.setenv("GIT_CONFIG_GLOBAL", str(config))
    monkeypatch.setenv("GIT_CONFIG_COUNT", "1")
    monkeypatch.setenv("GIT_CONFIG_KEY_0", f"url.file://{world.bolt_cache}.insteadOf")
    monkeypatch.setenv("GIT_CONFIG_VALUE_0", location)

    outcome = _attack(world, {"kind": "git", "location": location}, PRIVATE)

    assert outcome.run.status == "done" and not outcome.leaked
    assert leaked_into(world.acme, HANDBOOK)


# --- Grants pinned to the folder granted -----------------------------------------------------------


def test_a_grant_replaced_by_a_link_fails_the_sync_saying_so(world):
    outcome = folder_whose_granted_folder_became_a_link(world)

    assert outcome.run.status == "failed"
    assert "has been replaced by a link" in outcome.run.error
    assert "manage.py folderroots <tenant> --add" in outcome.run.error
    assert leaked_into(world.acme, "The share of the acme team")  # the first sync's documents stay


def test_a_grant_replaced_by_another_folder_fails_until_the_operator_grants_it_again(world):
    source_id = _create(world, {"kind": "folder", "location": str(world.share)})
    world.share.rename(world.share.with_name("acme-share-before"))
    world.share.mkdir()
    (world.share / "other.md").write_text("# Other\n\nA folder put in the granted one's place.\n")

    refused = attacker_sync(world, source_id)
    call_command("folderroots", "acme", "--add", str(world.share), stdout=io.StringIO())
    allowed = attacker_sync(world, source_id)

    assert refused.status == "failed" and "has been replaced by another folder" in refused.error
    assert (allowed.status, allowed.new) == ("done", 1), allowed.error
    assert AuditEvent.objects.filter(tenant=world.acme, action="folder_grant.repinned").exists()


def test_a_grant_made_before_pins_existed_is_pinned_at_its_first_use(world):
    FolderGrant.objects.filter(tenant=world.acme).update(device=None, inode=None)
    source_id = _create(world, {"kind": "folder", "location": str(world.share)})

    run = attacker_sync(world, source_id)

    grant = FolderGrant.objects.get(tenant=world.acme)
    info = os.stat(world.share)
    assert run.status == "done"
    assert (int(grant.device), int(grant.inode)) == (info.st_dev, info.st_ino)


def test_the_migration_pins_the_grants_whose_folder_is_there(world, tmp_path):
    migration = importlib.import_module("knowledge.migrations.0023_foldergrant_pinned")
    gone = FolderGrant.objects.create(tenant=world.acme, path=str(tmp_path / "gone"))
    link = tmp_path / "link"
    link.symlink_to(world.bolt_share)
    linked = FolderGrant.objects.create(tenant=world.acme, path=str(link))
    FolderGrant.objects.filter(tenant=world.acme).update(device=None, inode=None)

    migration.pin_existing(apps, None)

    pinned = {grant.path: grant.inode for grant in FolderGrant.objects.filter(tenant=world.acme)}
    assert pinned[str(world.share.resolve())] == os.stat(world.share).st_ino
    assert pinned[gone.path] is None and pinned[linked.path] is None


# --- Local repositories opened by descriptor ----------------------------------------------------------


@pytest.mark.parametrize("swapped", ["the repository", "its .git folder"])
def test_a_link_swapped_in_between_the_check_and_the_open_is_refused(world, monkeypatch, swapped):
    source_id = _create(world, {"kind": "git", "location": f"file://{world.handbook}"})
    target = world.handbook if swapped == "the repository" else world.handbook / ".git"
    check = git_connector.folder_location_check
    calls = []

    def checked_then_swapped(**kwargs):
        real = check(**kwargs)
        if not calls:
            target.rename(target.with_name(target.name + "-before"))
            target.symlink_to(world.bolt_cache, target_is_directory=True)
        calls.append(real)
        return real

    monkeypatch.setattr(git_connector, "folder_location_check", checked_then_swapped)

    run = attacker_sync(world, source_id)

    assert run.status == "failed", run.errors
    said = "changed while it was being opened" if swapped == "the repository" else ".git is a link"
    assert said in run.error and "Nothing changed" in run.error
    assert not leaked_into(world.acme, PRIVATE)


def test_a_file_url_repository_is_read_through_the_descriptors_opened(world):
    source_id = _create(world, {"kind": "git", "location": f"file://{world.handbook}"})
    control = world.handbook / ".git"
    _swapped_after_open(
        world, lambda: (control.rename(world.handbook / ".git-before"), control.symlink_to(world.bolt_cache))
    )

    run = attacker_sync(world, source_id)

    assert (run.status, run.new) == ("done", 1), run.error
    assert leaked_into(world.acme, HANDBOOK) and not leaked_into(world.acme, PRIVATE)


def test_a_working_copy_whose_git_is_a_file_is_refused_with_a_message(world):
    (world.share / "worktree").mkdir()
    (world.share / "worktree" / ".git").write_text(f"gitdir: {world.bolt_cache}\n")

    outcome = _attack(world, {"kind": "git", "location": str(world.share / "worktree")}, PRIVATE)

    assert outcome.run.status == "failed" and ".git is a file" in outcome.run.error
    assert not outcome.leaked


def test_a_branch_name_cannot_walk_out_of_the_repository(world):
    outcome = _attack(world, {"kind": "git", "location": str(world.handbook), "branch": "../../../../etc"}, PRIVATE)

    assert outcome.run.status == "failed" and "not a branch name" in outcome.run.error


# --- Hard links and other file systems ------------------------------------------------------------------


def test_a_hard_link_is_named_in_the_runs_errors_and_the_rest_of_the_folder_is_read(world):
    outcome = folder_with_a_hard_link_to_another_tenants_upload(world)

    assert outcome.run.status == "done"
    [error] = [e for e in outcome.run.errors if e["document"] == "minutes.md"]
    assert "a hard link (2 names for one file)" in error["error"]
    assert "--allow-hard-links" in error["error"]
    assert leaked_into(world.acme, "The share of the acme team")


def test_the_operator_may_allow_hard_links_in_one_grant(world):
    os.link(world.uploads / "bolt" / "0f" / "minutes.md", world.share / "minutes.md")
    out = io.StringIO()

    call_command("folderroots", "acme", "--allow-hard-links", str(world.share), stdout=out)
    outcome = _attack(world, {"kind": "folder", "location": str(world.share)}, MINUTES)

    assert "hard links allowed" in out.getvalue()
    assert outcome.run.status == "done" and outcome.leaked  # the operator's choice, recorded
    event = AuditEvent.objects.get(tenant=world.acme, action="folder_grant.changed")
    assert event.changes["allow_hard_links"] == [False, True]


def test_a_hard_linked_ref_of_a_local_repository_is_refused(world):
    head = world.handbook / ".git" / "refs" / "heads" / "master"
    head.unlink()
    os.link(world.bolt_cache / "refs" / "heads" / "master", head)

    outcome = _attack(world, {"kind": "git", "location": str(world.handbook)}, PRIVATE)

    assert outcome.run.status == "failed" and "a hard link" in outcome.run.error
    assert not outcome.leaked


def test_a_file_on_another_file_system_than_its_grant_is_refused_unless_allowed(world):
    other = Path("/dev/shm")
    if not other.is_dir() or other.stat().st_dev == world.share.stat().st_dev:
        pytest.skip("no second file system to put a file on")
    file = other / f"kb-test-{os.getpid()}-{time.monotonic_ns()}.md"
    file.write_text("# Elsewhere\n")
    try:
        info = file.stat()
        grant = FolderGrant.objects.get(tenant=world.acme)
        with pytest.raises(LinkedFile, match="another file system"):
            file_links_check(info, grant=grant)
        grant.allow_hard_links = True
        file_links_check(info, grant=grant)
    finally:
        file.unlink()


# --- Blobs sized before they are inflated -----------------------------------------------------------


def test_a_blob_over_the_cap_is_named_with_its_size_and_ratio_and_never_inflated(world):
    outcome = git_blob_that_inflates_a_thousandfold(world)

    assert outcome.run.status == "done" and outcome.run.new == 1
    [error] = outcome.run.errors
    assert error["document"] == "bomb.txt"
    assert "bomb.txt: the file unpacks to 8 MB from" in error["error"]
    assert "times), more than the limit of 1 MB" in error["error"]
    assert [name for name, _ in world.handed] == ["note.md"]


def test_a_blob_under_the_cap_but_past_the_ratio_is_refused_too(world, settings):
    settings.KB_PARSE_MAX_UNPACKED_MB = 100
    bombs = _bomb(world.share / "bombs", size=4 * MiB)

    outcome = _attack(world, {"kind": "git", "location": str(bombs)}, "0000000000")

    [error] = outcome.run.errors
    assert "bomb.txt: the file unpacks to" in error["error"] and "the limit is 100 times" in error["error"]


def test_object_sizes_read_from_headers_match_every_object_of_a_deltified_pack(world, tmp_path):
    work = Tree(tmp_path / "deltas", {"a.txt": "line of text\n" * 5000})
    for n in range(3):
        (work.path / "a.txt").write_text("line of text\n" * 5000 + f"edit {n}\n")
        porcelain.add(str(work.path), paths=[str(work.path / "a.txt")])
        porcelain.commit(str(work.path), message=b"edit", author=b"A <a@x>", committer=b"A <a@x>")
    with Repo(str(work.path)) as repo:
        objects = sorted(repo.object_store)
    packed = Repo.init_bare(str(tmp_path / "packed"), mkdir=True)
    pack_dir = Path(packed.object_store.pack_dir)
    with open(pack_dir / "pack-test.pack", "wb") as pack, open(pack_dir / "pack-test.idx", "wb") as index:
        porcelain.pack_objects(str(work.path), objects, pack, index, deltify=True)
    packed.close()

    with Repo(str(tmp_path / "packed")) as repo, Repo(str(work.path)) as loose:
        sizes = ObjectSizes(repo.object_store)
        loose_sizes = ObjectSizes(loose.object_store)
        try:
            kinds = {repo.object_store.get_unpacked_object(oid).pack_type_num for oid in objects}
            for oid in objects:
                length = len(repo.object_store[oid].as_raw_string())
                assert sizes.of(oid).size == length
                assert loose_sizes.of(oid).size == length
                assert 0 < sizes.of(oid, stored=True).stored
        finally:
            sizes.close()
            loose_sizes.close()
    assert kinds & {6, 7}, "the pack holds deltas"
