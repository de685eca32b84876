"""The demo's setup: a ``demo`` tenant with two users over the Django 5.2 documentation.

Every step is skipped when already done, so a second run reuses the tenant, the download and the
documents (re-ingesting unchanged files creates nothing). The demo sits above ``knowledge``: it
uses its services and nothing here imports ``retrieval``.
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
from knowledge.services import IngestReport, paths_ingest, source_get_or_create

DJANGO_VERSION = "5.2.19"
DOCS_URL = "https://docs.djangoproject.com/en/5.2/"
TENANT_SLUG = "demo"
EXAMPLE_QUESTION = "How do I write a custom model field?"


@dataclass(frozen=True)
class DemoSource:
    """A source of the demo tenant: folders under Django's ``docs/`` and a recency half-life."""

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
    """What ``demo_setup`` left in place: the tenant, the docs folder and one report per source."""

    tenant: Tenant
    docs: Path
    reports: dict[str, IngestReport]


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


def demo_sources_ingest(
    *,
    tenant: Tenant,
    docs: Path,
    progress: bool = False,
    on_source: Callable[[str, IngestReport], None] | None = None,
) -> dict[str, IngestReport]:
    """Ingest the Django docs under ``docs`` as the demo's sources (reST, linked to the online docs).

    ``on_source(name, report)`` is called after each source, in order. Returns the reports by source.
    """
    reports: dict[str, IngestReport] = {}
    for spec in SOURCES:
        source = source_get_or_create(tenant=tenant, name=spec.name, half_life_days=spec.half_life_days)
        reports[spec.name] = paths_ingest(
            tenant=tenant,
            source=source,
            paths=[docs / folder for folder in spec.folders],
            root=docs,
            fmt="rst",
            uri_prefix=DOCS_URL,
            exclude=["*_images/*"],
            progress=progress,
        )
        if on_source:
            on_source(spec.name, reports[spec.name])
    return reports


def demo_setup(
    *,
    downloads: Path,
    progress: bool = False,
    log: Callable[[str], None] | None = None,
    on_source: Callable[[str, IngestReport], None] | None = None,
) -> DemoSetup:
    """Tenant and users, Django's docs (downloaded into ``downloads`` once), its five sources ingested."""
    tenant = demo_tenant_setup()
    docs = django_docs_download(downloads=downloads, log=log)
    reports = demo_sources_ingest(tenant=tenant, docs=docs, progress=progress, on_source=on_source)
    return DemoSetup(tenant=tenant, docs=docs, reports=reports)
