"""Django setup for benchmark scripts run as ``python benchmarks/<name>.py`` from the project root."""

import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def django_setup() -> None:
    sys.path.insert(0, str(ROOT))
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    # As the tables' owner, as the test suite: some build a second database or drop indexes
    # (docs/deployment.md#database-roles).
    os.environ.setdefault("KB_DATABASE_ROLE", "owner")
    import django

    django.setup()
