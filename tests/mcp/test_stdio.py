"""``manage.py mcp``: the MCP server over stdio, driven by the SDK's own stdio client."""

from __future__ import annotations

import subprocess
import sys

from mcp import ClientSession, StdioServerParameters, stdio_client

from tests.mcp.conftest import key_for, unwrapped
from tests.mcp.processes import ROOT, child_environment


def _over_stdio(arguments: list[str], work, **environment: str):
    parameters = StdioServerParameters(
        command=sys.executable, args=["manage.py", "mcp", *arguments], env=child_environment(**environment), cwd=ROOT
    )

    async def run():
        async with stdio_client(parameters) as (read, write), ClientSession(read, write) as session:
            await session.initialize()
            return await work(session)

    return unwrapped(run())


def test_the_stdio_command_serves_the_tools_as_the_tokens_member(acme):
    key = key_for(acme.users["member"], acme.tenant)

    async def work(session):
        tools = await session.list_tools()
        found = await session.call_tool("search", {"query": "bicycle tyre puncture", "k": 10})
        answer = await session.call_tool("ask", {"question": "How do I fix a flat tyre?", "extractive": True})
        sources = await session.list_resources()
        bad = await session.call_tool("search", {"query": "tyre", "k": 500})
        hidden = await session.call_tool("fetch", {"document_id": acme.documents["board"].pk})
        return tools, found, answer, sources, bad, hidden

    tools, found, answer, sources, bad, hidden = _over_stdio(["--token", key], work)

    assert {tool.name for tool in tools.tools} == {"search", "ask", "fetch", "list_sources", "attach_file"}
    assert [row["document_id"] for row in found.structured_content["results"]] == [acme.documents["public"].pk]
    assert answer.structured_content["found"] is True and answer.structured_content["conversation_id"]
    assert answer.structured_content["citations"][0]["document_id"] == acme.documents["public"].pk
    assert [r.name for r in sources.resources] == ["handbook"]
    assert bad.is_error and "k: Input should be less than or equal to 50" in bad.content[0].text
    assert hidden.is_error and hidden.structured_content["error"]["code"] == "not_found"


def test_the_stdio_command_takes_its_token_from_the_environment_too(acme, globex):
    key = key_for(globex.users["owner"], globex.tenant)

    async def work(session):
        return await session.call_tool("list_sources", {})

    listed = _over_stdio([], work, KB_MCP_TOKEN=key)

    assert [row["name"] for row in listed.structured_content["sources"]] == ["board", "handbook"]
    assert all(row["id"] not in {s.pk for s in acme.sources.values()} for row in listed.structured_content["sources"])


def test_the_stdio_command_refuses_a_bad_or_missing_token_with_a_message(transactional_db):
    for arguments, words in [
        (["--token", "kbm_" + "0" * 40], "Invalid token: it does not exist or was revoked."),
        (["--token", "not-a-key"], "Not a membership token"),
        ([], "Give a membership token: --token KEY or KB_MCP_TOKEN=KEY."),
    ]:
        env = child_environment()
        env.pop("KB_MCP_TOKEN", None)
        run = subprocess.run(
            [sys.executable, "manage.py", "mcp", *arguments],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
            stdin=subprocess.DEVNULL,
        )
        assert run.returncode != 0 and words in run.stderr and "Traceback" not in run.stderr
        assert run.stdout == ""
