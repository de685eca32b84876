"""The Celery app. Without a broker (``CELERY_BROKER_URL``/``REDIS_URL`` unset) tasks run eagerly."""

import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")

app = Celery("knowledge_base")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()
