"""Registered names of the retrieval app's Celery tasks (``retrieval.tasks`` registers under them).

Services queue these tasks by name (``core.queue``), so a service never imports the tasks module.
"""

WALK_RUN = "retrieval.tasks.walk_run_task"
