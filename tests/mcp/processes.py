"""Child processes on the test database: ``manage.py`` commands and gunicorn."""

from __future__ import annotations

import os
from pathlib import Path
from urllib.parse import quote

from django.db import connection

ROOT = Path(__file__).resolve().parents[2]


def database_url() -> str:
    """The test database as a DATABASE_URL (children see committed data only)."""
    db = connection.settings_dict
    host = quote(db["HOST"], safe="")
    port = f":{db['PORT']}" if db["PORT"] else ""
    return f"postgresql://{db['USER']}:{quote(db['PASSWORD'] or '')}@{host}{port}/{db['NAME']}"


def child_environment(**extra: str) -> dict[str, str]:
    return {
        **os.environ,
        "DATABASE_URL": database_url(),
        "DJANGO_SETTINGS_MODULE": "config.settings",
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "TOKENIZERS_PARALLELISM": "false",
        **extra,
    }
