"""Queue a Celery task by its registered name once the current transaction commits.

Services queue the tasks that call them (a task is a thin wrapper that imports its service), so
a service never imports its app's ``tasks`` module: it names the task (each app's ``task_names``
module holds the names, and its tasks register under them) and ``task_enqueue`` looks the task
up in the Celery app's registry when the transaction commits. Looking the task up, rather than
``send_task``, keeps the task's own options (retries, time limits) and eager execution: without a
broker (``CELERY_TASK_ALWAYS_EAGER``) the task runs in-process at commit, as ``.delay`` would.
"""

from __future__ import annotations

from functools import partial

from celery import Task, current_app
from django.db import transaction


def task_get(name: str) -> Task:
    """The Celery task registered as ``name`` (e.g. ``"knowledge.tasks.enrichment_task"``).

    Imports the installed apps' ``tasks`` modules first if the task is not registered yet in
    this process (``app.autodiscover_tasks`` runs on the loader's default-module import).
    ``KeyError`` if no app defines it.
    """
    app = current_app
    if name not in app.tasks:
        app.loader.import_default_modules()
    return app.tasks[name]


def task_send(name: str, *args, queue: str | None = None) -> None:
    """Queue task ``name`` with positional ``args`` now (run it now, without a broker), on
    ``queue`` when given (else where the routes send it: the default queue).

    Without a broker, exceptions of the task propagate (``CELERY_TASK_EAGER_PROPAGATES``); with
    one, an unreachable broker raises.
    """
    task = task_get(name)
    if queue:
        task.apply_async(args, queue=queue)
    else:
        task.delay(*args)


def task_enqueue(name: str, *args, robust: bool = False) -> None:
    """Queue task ``name`` with positional ``args`` once the current transaction commits (at
    once outside a transaction), so a worker never sees uncommitted rows.

    ``robust``: an exception while queueing (or, without a broker, while running) the task is
    logged by Django instead of propagating to the code that committed.
    """
    transaction.on_commit(partial(task_send, name, *args), robust=robust)
