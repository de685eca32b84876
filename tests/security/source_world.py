"""What the source attack tests (``test_source_attacks``, ``test_git_folder_attacks``) share: the
two tenants with the victim's files on disk, git repositories made on the fly and served over
dumb HTTP, and the outcome of an attack sent through the REST API.

``attacker_and_victim(settings, tmp_path)`` builds tenant ``acme`` (the attacker, an admin with an
API token) and tenant ``bolt`` (the victim), whose uploaded board minutes (``MINUTES``) lie in the
data directory's ``uploads/`` and whose private repository (``PRIVATE``) lies in the git cache, as
the product leaves them.
"""

from __future__ import annotations

import io
from dataclasses import dataclass
from pathlib import Path

from django.test import TestCase
from dulwich import porcelain
from dulwich.repo import Repo
from dulwich.server import update_server_info

from core.models import Membership
from knowledge.models import DocumentVersion, SyncRun
from tests.api.conftest import client_for
from tests.factories import MembershipFactory, TenantFactory
from tests.knowledge.web_site import Response

MINUTES = "boardminutesmarker: the board approved the acquisition of Zephyr Ltd."
PRIVATE = "privaterepomarker: the launch date is the third of March."


class Tree:
    """A git working copy at ``path`` with one commit of ``files`` (name -> text)."""

    def __init__(self, path: Path, files: dict[str, str]):
        porcelain.init(str(path)).close()
        for name, text in files.items():
            (path / name).write_text(text)
            porcelain.add(str(path), paths=[str(path / name)])
        porcelain.commit(str(path), message=b"files", author=b"A <a@x>", committer=b"A <a@x>")
        self.path = path


def dumb_http_pages(bare: Path) -> dict[str, Response]:
    """A bare repository's files as the pages of a dumb-HTTP git server under ``/repo.git/``
    (for ``tests.knowledge.web_site.WebSite``)."""
    with Repo(str(bare)) as repo:
        update_server_info(repo)
    pages = {}
    for file in bare.rglob("*"):
        if file.is_file():
            relative = file.relative_to(bare).as_posix()
            pages[f"/repo.git/{relative}"] = Response(200, file.read_bytes(), {"Content-Type": "text/plain"})
    # A static file server ignores the query of git's first request, answering the plain ref list.
    pages["/repo.git/info/refs?service=git-upload-pack"] = pages["/repo.git/info/refs"]
    return pages


@dataclass
class Tenants:
    """The attacker's API client and tenant, the victim's tenant, and where the victim's files lie."""

    client: object
    acme: object
    bolt: object
    uploads: Path  # the data directory's uploads/, holding bolt's minutes
    bolt_cache: Path  # bolt's private repository, fetched into the git cache


def attacker_and_victim(settings, tmp_path: Path) -> Tenants:
    """Point ``KB_DATA_DIR`` (pytest-django's ``settings``) at ``tmp_path / "data"`` and build the
    two tenants with what the product leaves on disk of bolt's: an upload and a fetched repository."""
    settings.KB_DATA_DIR = tmp_path / "data"
    settings.KB_DATA_DIR.mkdir(exist_ok=True)
    acme, bolt = TenantFactory(slug="acme"), TenantFactory(slug="bolt")
    client = client_for(MembershipFactory(tenant=acme, role=Membership.Role.ADMIN).user)
    uploads = settings.KB_DATA_DIR / "uploads"
    (uploads / "bolt" / "0f").mkdir(parents=True)
    (uploads / "bolt" / "0f" / "minutes.md").write_text(f"# Board minutes\n\n{MINUTES}\n")
    private = Tree(tmp_path / "bolt-work", {"plans.md": f"# Plans\n\n{PRIVATE}\n"})
    bolt_cache = settings.KB_DATA_DIR / "git" / str(bolt.pk) / "7"
    bolt_cache.parent.mkdir(parents=True)
    porcelain.clone(str(private.path), str(bolt_cache), bare=True, errstream=io.BytesIO()).close()
    return Tenants(client, acme, bolt, uploads, bolt_cache)


@dataclass
class Outcome:
    """What an attack got: the create response's status (and error code), the sync run if one ran,
    the message a user sees, whether the victim's marker reached the attacker's tenant, the
    connections the test servers counted, and for a blob bomb the largest file (MB) the git
    reader was handed."""

    status: int
    code: str = ""
    message: str = ""
    run: SyncRun | None = None
    leaked: bool = False
    connections: int = 0
    handed_mb: float | None = None

    @property
    def refused(self) -> bool:
        """A 4xx at create, or a run that failed or skipped what the attack aimed at."""
        return 400 <= self.status < 500 or (self.run is not None and not self.leaked)


def attacker_sync(world, source_id: int) -> SyncRun:
    """POST a sync as the attacker (``world.client``); the queued run executes at commit, as it
    does without a broker. Returns the source's latest run."""
    with TestCase.captureOnCommitCallbacks(execute=True):
        world.client.post(f"/api/v1/sources/{source_id}/sync/")
    return SyncRun.objects.filter(source_id=source_id).order_by("-pk").first()


def leaked_into(tenant, marker: str) -> bool:
    """Whether any stored version of ``tenant``'s documents holds ``marker``."""
    return DocumentVersion.objects.filter(document__tenant=tenant, text__contains=marker).exists()


def run_message(run: SyncRun) -> str:
    """The run's error, or else its per-document errors joined."""
    return run.error or " ".join(e["error"] for e in run.errors)
