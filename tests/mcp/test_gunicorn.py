"""/mcp under the production server: gunicorn with ``config/gunicorn_conf.py`` (WSGI, threads)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time

import pytest

from tests.conftest import free_port
from tests.mcp.conftest import key_for, with_session
from tests.mcp.processes import ROOT, child_environment


@pytest.fixture
def gunicorn_url(transactional_db, tmp_path):
    """A gunicorn of one worker with two threads, as production runs it, on a free port."""
    port = free_port()
    env = child_environment(KB_BIND=f"127.0.0.1:{port}", KB_WEB_WORKERS="1", KB_WEB_THREADS="2")
    log = tmp_path / "gunicorn.log"
    command = [sys.executable, "-m", "gunicorn", "-c", "config/gunicorn_conf.py", "config.wsgi:application"]
    with log.open("wb") as out:
        process = subprocess.Popen(
            command, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            assert process.poll() is None, log.read_text()[-3000:]
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                time.sleep(0.2)
        else:
            pytest.fail(f"gunicorn did not listen: {log.read_text()[-3000:]}")
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        os.killpg(process.pid, signal.SIGTERM)
        process.wait(30)


def test_gunicorns_threaded_workers_serve_mcp_with_the_sdks_client(gunicorn_url, acme):
    key = key_for(acme.users["member"], acme.tenant)

    async def work(session):
        tools = await session.list_tools()
        found = await session.call_tool("search", {"query": "bicycle tyre puncture"})
        answer = await session.call_tool("ask", {"question": "How do I fix a flat tyre?", "extractive": True})
        return tools, found, answer

    tools, found, answer = with_session(gunicorn_url, key, work)

    assert {tool.name for tool in tools.tools} == {"search", "ask", "fetch", "list_sources", "attach_file"}
    assert [r["document_id"] for r in found.structured_content["results"]] == [acme.documents["public"].pk]
    assert answer.structured_content["citations"] and answer.structured_content["trace_id"]
