"""The demo's setup: a ``demo`` tenant with two users over the Django 5.2 documentation.

The docs are five ``folder`` sources over the downloaded ``docs/`` folder, each selecting its
sub-folders with include globs. Every step is skipped when already done, so a second run reuses
the tenant and the download, and each source's sync finds nothing new (untouched files are not
even read). The demo sits above ``knowledge``: it uses its services and nothing here imports
``retrieval``.
"""

from __future__ import annotations

import subprocess
import sys
import tarfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from django.contrib.auth.models import Permission

from core.errors import ApplicationError
from core.models import Tenant
from core.services import membership_create, tenant_create
from knowledge.folder_grants import folder_grant_add
from knowledge.models import Source, SyncRun
from knowledge.services.sources import source_create, source_update
from knowledge.services.sync import source_sync

DJANGO_VERSION = "5.2.19"
DOCS_URL = "https://docs.djangoproject.com/en/5.2/"
TENANT_SLUG = "demo"
EXAMPLE_QUESTION = "How do I write a custom model field?"


@dataclass(frozen=True)
class DemoSource:
    """A source of the demo tenant: folders under Django's ``docs/`` and a recency half-life."""

    def settings(self, docs: Path) -> dict:
        """The ``folder`` source's fields over ``docs`` (reST .txt files linked to the online docs)."""
        return {
            "kind": Source.Kind.FOLDER,
            "location": str(docs.resolve()),
            "include": [f"{folder}/*" for folder in self.folders],
            "exclude": ["*_images/*"],
            "text_format": "rst",
            "uri_prefix": DOCS_URL,
            "half_life_days": self.half_life_days,
        }

    name: str
    folders: tuple[str, ...]
    half_life_days: float | None = None


SOURCES = (
    DemoSource("topics", ("topics",)),
    DemoSource("howto", ("howto",)),
    DemoSource("ref", ("ref",)),
    DemoSource("intro-faq", ("intro", "faq")),
    DemoSource("releases", ("releases",), half_life_days=365.0),
)
# (username, password, role); the admin is staff and may curate knowledge and quality and read traces.
USERS = (("admin", "admin-demo-pass", "admin"), ("member", "member-demo-pass", "member"))


class DownloadFailed(ApplicationError):
    code = "download_failed"
    status = 502


@dataclass
class DemoSetup:
    """What ``demo_setup`` left in place: the tenant, the docs folder and one sync run per source."""

    tenant: Tenant
    docs: Path
    runs: dict[str, SyncRun]


def demo_tenant_setup(*, slug: str = TENANT_SLUG) -> Tenant:
    """The ``demo`` tenant (created if missing) with its admin and member users (passwords reset)."""
    tenant = Tenant.objects.filter(slug=slug).first() or tenant_create(slug=slug, name="Demo team")
    for username, password, role in USERS:
        user = membership_create(tenant=tenant, username=username, password=password, role=role, staff=role == "admin")
        if role == "admin":
            user.user_permissions.set(
                Permission.objects.filter(content_type__app_label__in=["core", "knowledge", "quality", "retrieval"])
            )
    return tenant


def django_docs_download(
    *, downloads: Path, version: str = DJANGO_VERSION, log: Callable[[str], None] | None = None
) -> Path:
    """Django's ``docs/`` folder from its source distribution, downloaded with pip once into ``downloads``.

    Raises ``DownloadFailed`` when pip cannot fetch the archive.
    """
    docs = downloads / f"django-{version}" / "docs"
    if docs.is_dir():
        return docs
    downloads.mkdir(parents=True, exist_ok=True)
    archive = downloads / f"django-{version}.tar.gz"
    if not archive.exists():
        if log:
            log(f"Downloading Django {version} source distribution with pip…")
        result = subprocess.run(
            [
                sys.executable,
                "-m",
                "pip",
                "download",
                "--no-deps",
                "--no-binary",
                ":all:",
                "--quiet",
                "-d",
                str(downloads),
                f"django=={version}",
            ],
            capture_output=True,
            text=True,
        )
        if result.returncode != 0 or not archive.exists():
            raise DownloadFailed(f"pip download of django=={version} failed:\n{result.stderr[-2000:]}")
    with tarfile.open(archive) as tar:
        members = [m for m in tar.getmembers() if m.name.startswith(f"django-{version}/docs/")]
        tar.extractall(downloads, members=members, filter="data")
    return docs


def demo_sources_sync(
    *,
    tenant: Tenant,
    docs: Path,
    progress: bool = False,
    on_source: Callable[[str, SyncRun], None] | None = None,
) -> dict[str, SyncRun]:
    """Create (or bring up to date) the demo's five folder sources over ``docs`` and sync each.

    The demo runs as the operator: it grants ``docs`` to the tenant first (a folder source may only
    read a granted folder). A source from an older demo (filled by ``manage.py ingest``) becomes a
    folder source in place, keeping its documents. ``on_source(name, run)`` is called after each sync, in order.
    Returns the runs by source name; ``ApplicationError`` when a sync failed.
    """
    runs: dict[str, SyncRun] = {}
    folder_grant_add(tenant=tenant, path=docs, granted_by="manage.py demo")
    for spec in SOURCES:
        source = Source.objects.for_tenant(tenant).filter(name=spec.name).first()
        if source is None:
            source = source_create(tenant=tenant, name=spec.name, **spec.settings(docs))
        elif any(getattr(source, k) != v for k, v in spec.settings(docs).items()):
            source = source_update(source=source, **spec.settings(docs))
        run = source_sync(source=source, progress=progress)
        if run.status != SyncRun.Status.DONE:
            raise ApplicationError(f"The demo source {spec.name!r} could not be synced: {run.error}")
        runs[spec.name] = run
        if on_source:
            on_source(spec.name, run)
    return runs


def demo_setup(
    *,
    downloads: Path,
    progress: bool = False,
    log: Callable[[str], None] | None = None,
    on_source: Callable[[str, SyncRun], None] | None = None,
) -> DemoSetup:
    """Tenant and users, Django's docs (downloaded into ``downloads`` once), its five sources synced."""
    tenant = demo_tenant_setup()
    docs = django_docs_download(downloads=downloads, log=log)
    runs = demo_sources_sync(tenant=tenant, docs=docs, progress=progress, on_source=on_source)
    return DemoSetup(tenant=tenant, docs=docs, runs=runs)
