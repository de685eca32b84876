"""The demo's setup: a ``demo`` tenant with two users over the Django 5.2 documentation.

The docs are five ``folder`` sources over the downloaded ``docs/`` folder, each selecting its
sub-folders with include globs. ``manage.py demo`` syncs the smallest one that answers its example
question first, answers and serves, and syncs the other four in the background. Every step is skipped when already done, so a second run reuses
the tenant and the download, and each source's sync finds nothing new (untouched files are not
even read). The demo sits above ``knowledge``: it uses its services and nothing here imports
``retrieval``.
"""

from __future__ import annotations

import contextvars
import subprocess
import sys
import tarfile
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from django.conf import settings
from django.contrib.auth.models import Permission
from django.db import connections

from core.errors import ApplicationError
from core.models import Tenant
from core.services import membership_create, tenant_create
from knowledge.folder_grants import folder_grant_add
from knowledge.models import Source, SyncRun
from knowledge.services.sources import source_create, source_update
from knowledge.services.sync import SyncBusy, source_sync, sync_run_execute, sync_run_request

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


# Smallest first: ``howto`` (34 files, about 5% of the chunks) answers EXAMPLE_QUESTION
# (howto/custom-model-fields.txt), so the demo answers and serves after it and syncs the rest
# in the background.
SOURCES = (
    DemoSource("howto", ("howto",)),
    DemoSource("intro-faq", ("intro", "faq")),
    DemoSource("topics", ("topics",)),
    DemoSource("ref", ("ref",)),
    DemoSource("releases", ("releases",), half_life_days=365.0),
)
FIRST_SOURCE = SOURCES[0].name
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


def demo_sources_prepare(*, tenant: Tenant, docs: Path) -> dict[str, Source]:
    """Create (or bring up to date) the demo's five folder sources over ``docs``; by name, in
    ``SOURCES`` order.

    The demo runs as the operator: it grants ``docs`` to the tenant first (a folder source may only
    read a granted folder). A source from an older demo (filled by ``manage.py ingest``) becomes a
    folder source in place, keeping its documents.
    """
    folder_grant_add(tenant=tenant, path=docs, granted_by="manage.py demo")
    sources: dict[str, Source] = {}
    for spec in SOURCES:
        source = Source.objects.for_tenant(tenant).filter(name=spec.name).first()
        if source is None:
            source = source_create(tenant=tenant, name=spec.name, **spec.settings(docs))
        elif any(getattr(source, k) != v for k, v in spec.settings(docs).items()):
            source = source_update(source=source, **spec.settings(docs))
        sources[spec.name] = source
    return sources


def demo_sources_sync(
    *,
    tenant: Tenant,
    docs: Path,
    names: Sequence[str] | None = None,
    progress: bool = False,
    on_source: Callable[[str, SyncRun], None] | None = None,
) -> dict[str, SyncRun]:
    """Prepare the demo's sources (``demo_sources_prepare``) and sync those named (default: all
    five), one after the other in this process. ``on_source(name, run)`` is called after each
    sync, in order. Returns the runs by source name; ``ApplicationError`` when a sync failed.
    """
    sources = demo_sources_prepare(tenant=tenant, docs=docs)
    runs: dict[str, SyncRun] = {}
    for name in names if names is not None else list(sources):
        run = source_sync(source=sources[name], progress=progress)
        runs[name] = _checked(name, run)
        if on_source:
            on_source(name, run)
    return runs


def _checked(name: str, run: SyncRun | None) -> SyncRun:
    if run is None or run.status != SyncRun.Status.DONE:
        raise ApplicationError(f"The demo source {name!r} could not be synced: {run.error if run else 'run deleted'}")
    return run


class BackgroundSync:
    """The demo's remaining sources syncing while it serves (``demo_sources_sync_background``).

    ``join()`` waits for them and returns the runs by name; it raises the error that stopped
    them (an ``ApplicationError`` for a failed sync), so a caller that waits sees it.
    """

    def __init__(self, thread: threading.Thread):
        self.thread = thread
        self.runs: dict[str, SyncRun] = {}
        self.error: BaseException | None = None

    def start(self) -> None:
        self.thread.start()

    def join(self, timeout: float | None = None) -> dict[str, SyncRun]:
        self.thread.join(timeout)
        if self.error is not None:
            raise self.error
        return self.runs


def demo_sources_sync_background(
    *,
    tenant: Tenant,
    names: Sequence[str],
    on_source: Callable[[str, SyncRun], None] | None = None,
    on_done: Callable[[dict[str, SyncRun]], None] | None = None,
    on_error: Callable[[BaseException], None] | None = None,
    poll_s: float = 2.0,
    start: bool = True,
) -> BackgroundSync:
    """Sync the demo sources ``names`` (prepared already) in the background; returns at once.
    ``start=False`` records the runs but leaves starting to the caller (``BackgroundSync.start``).

    A pending run of each is recorded now, so they show as syncing (sources page, an answer's
    ``syncing``) from this call on. With a broker (``CELERY_BROKER_URL``) they are queued as
    Celery tasks and a thread here waits for them (polling every ``poll_s`` seconds); without
    one, the thread runs them one after the other, in ``names`` order. ``on_source(name, run)``
    after each, in order; ``on_done(runs)`` once all are done, or ``on_error(exc)`` when one
    failed (``ApplicationError``) or the thread raised. The thread closes its database
    connections when it ends; it is a daemon, so a server stopped meanwhile does not wait for it.
    """
    broker = not settings.CELERY_TASK_ALWAYS_EAGER
    sources = {s.name: s for s in Source.objects.for_tenant(tenant).filter(name__in=names)}
    pending = [(name, sync_run_request(source=sources[name], enqueue=broker)) for name in names]

    def run() -> None:
        try:
            for name, requested in pending:
                if broker:
                    finished = _finished(requested.pk, poll_s)
                else:
                    finished = _executed(requested.pk)
                background.runs[name] = _checked(name, finished)
                if on_source:
                    on_source(name, finished)
            if on_done:
                on_done(background.runs)
        except BaseException as exc:  # reported, and raised again by join()
            background.error = exc
            if on_error:
                on_error(exc)
        finally:
            connections.close_all()

    # The thread keeps this context's variables (the audit actor, the RLS scope).
    context = contextvars.copy_context()
    background = BackgroundSync(threading.Thread(target=context.run, args=(run,), name="demo-sync", daemon=True))
    if start:
        background.start()
    return background


def _executed(run_id: int) -> SyncRun | None:
    """Run sync run ``run_id`` here; one still leased by a demo stopped a moment ago (its
    lease not run out yet) is taken over once the lease ends."""
    while True:
        try:
            return sync_run_execute(run_id=run_id)
        except SyncBusy as busy:
            time.sleep(min(busy.retry_in, 30.0))


def _finished(run_id: int, poll_s: float) -> SyncRun | None:
    """Sync run ``run_id`` once a worker finished it (done or failed); None if it was deleted."""
    while True:
        run = SyncRun.objects.filter(pk=run_id).first()
        if run is None or run.status in (SyncRun.Status.DONE, SyncRun.Status.FAILED):
            return run
        time.sleep(poll_s)


def demo_setup(
    *,
    downloads: Path,
    progress: bool = False,
    log: Callable[[str], None] | None = None,
    on_source: Callable[[str, SyncRun], None] | None = None,
    names: Sequence[str] | None = None,
) -> DemoSetup:
    """Tenant and users, Django's docs (downloaded into ``downloads`` once), its five sources
    prepared and those named synced (default: all five; ``manage.py demo`` syncs ``FIRST_SOURCE``
    here and the rest with ``demo_sources_sync_background``)."""
    tenant = demo_tenant_setup()
    docs = django_docs_download(downloads=downloads, log=log)
    runs = demo_sources_sync(tenant=tenant, docs=docs, names=names, progress=progress, on_source=on_source)
    return DemoSetup(tenant=tenant, docs=docs, runs=runs)
