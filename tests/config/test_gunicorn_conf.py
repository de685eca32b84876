"""The production gunicorn settings (config/gunicorn_conf.py) as gunicorn itself reads them."""

import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _gunicorn(option: str, **env: str) -> subprocess.CompletedProcess:
    command = [sys.executable, "-m", "gunicorn", "-c", "config/gunicorn_conf.py", option, "config.wsgi:application"]
    return subprocess.run(command, cwd=ROOT, env={**os.environ, **env}, capture_output=True, text=True, timeout=300)


def test_the_workers_threads_and_address_come_from_the_environment():
    run = _gunicorn("--print-config", KB_WEB_WORKERS="3", KB_WEB_THREADS="2", KB_BIND="127.0.0.1:8123")
    assert run.returncode == 0, run.stderr[-2000:]
    printed = dict(re.findall(r"^(\w+)\s+= (.*)$", run.stdout, flags=re.MULTILINE))
    assert printed["workers"] == "3" and printed["threads"] == "2" and printed["worker_class"] == "gthread"
    assert printed["bind"] == "['127.0.0.1:8123']" and printed["preload_app"] == "False"


def test_a_bad_worker_count_stops_gunicorn_with_a_message_naming_the_variable():
    run = _gunicorn("--check-config", KB_WEB_WORKERS="zero")
    assert run.returncode != 0
    assert "KB_WEB_WORKERS='zero' is not an integer." in run.stdout + run.stderr
