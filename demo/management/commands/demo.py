"""The demo: a tenant over the Django 5.2 documentation, served on 127.0.0.1.

Migrates, sets up the ``demo`` tenant, its users and documents (``demo.services.demo_setup``;
each step is skipped when already done), answers an example question, then serves portal, API
and admin. ``--no-serve`` stops after the answer.
"""

from __future__ import annotations

import time

from django.conf import settings
from django.core.management import call_command

from core.commands import TenantCommand
from demo.services import EXAMPLE_QUESTION, demo_setup
from people.asking import ask


def example_answer(*, tenant, question: str):
    """The demo's one question, asked as every caller asks (``people.asking.ask``, as the operator:
    no member, so nothing is kept): an ``Answer`` (``.text``, ``.citations``) to ``question``."""
    return ask(tenant=tenant, user=None, question=question).answer


class Command(TenantCommand):
    help = "Set up and serve the demo knowledge base over the Django 5.2 docs."

    def add_arguments(self, parser):
        parser.add_argument("--no-serve", action="store_true", help="stop after printing the example answer")
        parser.add_argument("--port", type=int, default=8000)

    def handle(self, *args, no_serve, port, **options):
        started = time.perf_counter()
        call_command("migrate", verbosity=0)
        setup = demo_setup(
            downloads=settings.KB_DEMO_DIR,
            progress=True,
            log=self.stdout.write,
            on_source=self._source_done,
        )
        answer = example_answer(tenant=setup.tenant, question=EXAMPLE_QUESTION)
        short = f"Short answer: {answer.short_answer}\n" if answer.short_answer else ""
        self.stdout.write(f"\nQ: {EXAMPLE_QUESTION}\n{short}{answer.text}")
        for citation in answer.citations:
            d = citation.as_dict()
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

    def _source_done(self, name, run):
        c = run.counts()
        seconds = (run.finished_at - run.started_at).total_seconds()
        if not (c["new"] or c["updated"] or c["deleted"] or c["failed"]):
            self.stdout.write(f"  {name}: nothing new ({c['unchanged']} documents unchanged, {seconds:.1f}s)")
            return
        self.stdout.write(
            f"  {name}: {c['new']} new, {c['updated']} updated, {c['unchanged']} unchanged, {c['deleted']} deleted, "
            f"{c['failed']} failed ({seconds:.0f}s)"
        )
