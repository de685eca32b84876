"""The demo: a tenant over the Django 5.2 documentation, served on 127.0.0.1.

Steps (each skipped when already done, so a second run reuses everything): migrate, create the
``demo`` tenant with an admin and a member, download Django's source distribution with pip,
ingest its docs as five sources, answer an example question, serve portal, API and admin.
"""

import subprocess
import sys
import tarfile
import time
from pathlib import Path

from django.conf import settings
from django.contrib.auth.models import Permission
from django.core.management import call_command
from django.core.management.base import CommandError

from knowledge.management.base import KnowledgeCommand
from knowledge.models import Tenant
from knowledge.services import membership_create, paths_ingest, source_get_or_create, tenant_create
from retrieval.answers import question_answer

DJANGO_VERSION = "5.2.19"
DOCS_URL = "https://docs.djangoproject.com/en/5.2/"
# (source name, folders under docs/, recency half-life in days or None)
SOURCES = [
    ("topics", ["topics"], None),
    ("howto", ["howto"], None),
    ("ref", ["ref"], None),
    ("intro-faq", ["intro", "faq"], None),
    ("releases", ["releases"], 365.0),
]
USERS = [("admin", "admin-demo-pass", "admin"), ("member", "member-demo-pass", "member")]
EXAMPLE_QUESTION = "How do I write a custom model field?"


class Command(KnowledgeCommand):
    help = "Set up and serve the demo knowledge base over the Django 5.2 docs."

    def add_arguments(self, parser):
        parser.add_argument("--no-serve", action="store_true", help="stop after printing the example answer")
        parser.add_argument("--port", type=int, default=8000)

    def handle(self, *args, no_serve, port, **options):
        started = time.perf_counter()
        call_command("migrate", verbosity=0)
        tenant = Tenant.objects.filter(slug="demo").first() or tenant_create(slug="demo", name="Demo team")
        for username, password, role in USERS:
            user = membership_create(
                tenant=tenant, username=username, password=password, role=role, staff=role == "admin"
            )
            if role == "admin":
                user.user_permissions.set(
                    Permission.objects.filter(content_type__app_label__in=["knowledge", "quality"])
                )
        docs = self._django_docs()
        for name, folders, half_life in SOURCES:
            source = source_get_or_create(tenant=tenant, name=name, half_life_days=half_life)
            report = paths_ingest(
                tenant=tenant,
                source=source,
                paths=[docs / f for f in folders],
                root=docs,
                fmt="rst",
                uri_prefix=DOCS_URL,
                exclude=["*_images/*"],
                progress=True,
            )
            c = report.counts()
            self.stdout.write(
                f"  {name}: {c['created']} new, {c['updated']} updated, {c['unchanged']} unchanged, "
                f"{c['duplicate']} duplicates, {c['chunks']} chunks embedded ({report.total_seconds:.0f}s)"
            )
        answer = question_answer(tenant=tenant, question=EXAMPLE_QUESTION)
        self.stdout.write(f"\nQ: {EXAMPLE_QUESTION}\n{answer.text}")
        for c in answer.citations:
            d = c.as_dict()
            self.stdout.write(
                f"  [{d['n']}] {d['title']} — {d['document']} v{d['version']} chunk {d['chunk']} ({d['uri']})"
            )
        self.stdout.write(f"\nReady in {time.perf_counter() - started:.0f}s.")
        self.stdout.write(
            f"Portal  http://127.0.0.1:{port}/        (member / member-demo-pass, or admin / admin-demo-pass)\n"
            f"Admin   http://127.0.0.1:{port}/admin/  (admin / admin-demo-pass)\n"
            f"API     http://127.0.0.1:{port}/api/v1/ (schema at /api/schema/, docs at /api/docs/)"
        )
        if no_serve:
            return
        call_command("collectstatic", interactive=False, verbosity=0)
        call_command("runserver", f"127.0.0.1:{port}", use_reloader=False, insecure_serving=True)

    def _django_docs(self) -> Path:
        """Download Django's sdist with pip (once) and return its extracted ``docs/`` folder."""
        downloads = settings.KB_DATA_DIR / "downloads"
        docs = downloads / f"django-{DJANGO_VERSION}" / "docs"
        if docs.is_dir():
            return docs
        downloads.mkdir(parents=True, exist_ok=True)
        archive = downloads / f"django-{DJANGO_VERSION}.tar.gz"
        if not archive.exists():
            self.stdout.write(f"Downloading Django {DJANGO_VERSION} source distribution with pip…")
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
                    f"django=={DJANGO_VERSION}",
                ],
                capture_output=True,
                text=True,
            )
            if result.returncode != 0 or not archive.exists():
                raise CommandError(f"pip download of django=={DJANGO_VERSION} failed:\n{result.stderr[-2000:]}")
        with tarfile.open(archive) as tar:
            members = [m for m in tar.getmembers() if m.name.startswith(f"django-{DJANGO_VERSION}/docs/")]
            tar.extractall(downloads, members=members, filter="data")
        return docs
