"""Registered names of the quality app's Celery tasks (``quality.tasks`` registers under them).

Services and the admin queue these tasks by name with ``core.queue.task_enqueue``, so a service
never imports the tasks module that imports it. The names are the tasks' import paths, as Celery
would name them, so queued messages keep working.
"""

CONFIG_CHANGE = "quality.tasks.config_change_task"
JUDGMENT_GENERATION = "quality.tasks.judgment_generation_task"
JUDGMENT_LIST_EVALUATE = "quality.tasks.judgment_list_evaluate_task"
