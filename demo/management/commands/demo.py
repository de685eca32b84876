"""The demo: a tenant over the Django 5.2 documentation, served on 127.0.0.1.

Migrates, sets up the ``demo`` tenant, its users and its smallest source (``demo.services.demo_setup``;
each step is skipped when already done), answers an example question from it, then serves portal,
API and admin while the other sources sync in the background (``demo_sources_sync_background``:
Celery tasks with a broker, a thread here without); it prints when all are in. ``--no-serve``
waits for them instead of serving, and exits non-zero if one failed.
"""

from __future__ import annotations

import time
import traceback

from django.conf import settings
from django.core.management import call_command

from core.commands import TenantCommand
from core.errors import ApplicationError
from demo.services import EXAMPLE_QUESTION, FIRST_SOURCE, SOURCES, demo_setup, demo_sources_sync_background
from people.answer_text import answer_head_lines
from people.asking import ask
from retrieval.request import AnswerRequest


def example_run(*, tenant, question: str):
    """The demo's one question, asked as every caller asks (``people.asking.ask``, as the operator:
    no member, so nothing is kept): the ``AnswerRun`` (``.answer``; ``.syncing``, the sources
    still syncing as it was made)."""
    return ask(AnswerRequest(question=question), tenant=tenant, user=None)


def example_answer(*, tenant, question: str):
    """``example_run``'s ``Answer`` (``.text``, ``.citations``) to ``question``."""
    return example_run(tenant=tenant, question=question).answer


class Command(TenantCommand):
    help = "Set up and serve the demo knowledge base over the Django 5.2 docs."

    def add_arguments(self, parser):
        parser.add_argument(
            "--no-serve", action="store_true", help="wait for all sources instead of serving, then exit"
        )
        parser.add_argument("--port", type=int, default=8000)

    def handle(self, *args, no_serve, port, **options):
        started = time.perf_counter()
        call_command("migrate", verbosity=0)
        setup = demo_setup(
            downloads=settings.KB_DEMO_DIR,
            progress=True,
            log=self.stdout.write,
            on_source=self._source_done,
            names=[FIRST_SOURCE],
        )
        rest = [spec.name for spec in SOURCES if spec.name != FIRST_SOURCE]
        background = demo_sources_sync_background(
            tenant=setup.tenant,
            names=rest,
            on_source=self._source_done,
            on_done=lambda runs: self._all_in(started, runs),
            on_error=self._sync_failed,
            start=False,
        )
        run = example_run(tenant=setup.tenant, question=EXAMPLE_QUESTION)
        answer = run.answer
        head = answer_head_lines(answer)  # the short answer, else the lead passage, as the portal shows them
        head_text = "".join(f"{line}\n" for line in head)
        self.stdout.write(f"\nQ: {EXAMPLE_QUESTION}\n{head_text}{answer.text}")
        for citation in answer.citations:
            d = citation.as_dict()
            self.stdout.write(
                f"  [{d['n']}] {d['title']} — {d['document']} v{d['version']} chunk {d['chunk']} ({d['uri']})"
            )
        if run.syncing:
            self.stdout.write(f"  (answered from what is in; still syncing: {', '.join(run.syncing)})")
        self.stdout.write(f"\nReady in {time.perf_counter() - started:.0f}s.")
        self.stdout.write(
            f"Portal  http://127.0.0.1:{port}/        (member / member-demo-pass, or admin / admin-demo-pass)\n"
            f"Admin   http://127.0.0.1:{port}/admin/  (admin / admin-demo-pass)\n"
            f"API     http://127.0.0.1:{port}/api/v1/ (schema at /api/schema/, docs at /api/docs/)"
        )
        self.stdout.write(
            f"\nThe other {len(rest)} sources ({', '.join(rest)}) sync in the background"
            + (": waiting for them." if no_serve else "; the portal's Sources page shows their progress.")
        )
        background.start()
        if no_serve:
            background.join()  # raises the error that stopped them: the command exits non-zero
            return
        call_command("collectstatic", interactive=False, verbosity=0)
        call_command("runserver", f"127.0.0.1:{port}", use_reloader=False, insecure_serving=True)

    def _all_in(self, started: float, runs) -> None:
        self.stdout.write(f"All {len(SOURCES)} sources in ({time.perf_counter() - started:.0f}s after the start).")

    def _sync_failed(self, exc: BaseException) -> None:
        if isinstance(exc, ApplicationError):
            self.stderr.write(f"The background sync stopped: {exc.message}")
        else:
            self.stderr.write("The background sync stopped:\n" + "".join(traceback.format_exception(exc)))

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
