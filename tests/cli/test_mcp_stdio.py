"""``arandu mcp --agent-id ID``: the memory tools over stdio, driven by the SDK's own client.

The server runs as the subprocess a desktop agent would launch, against a served API with a
real worker.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
import uuid
from typing import Any

import anyio
from mcp import Client, StdioServerParameters
from mcp_types import CallToolResult, TextContent

from tests.cli.conftest import CliStack
from tests.support.api_server import TEST_API_KEY


def server_command(stack: CliStack, agent_id: str) -> list[str]:
    """The command line an MCP client configuration would hold."""
    return [
        sys.executable,
        "-m",
        "arandu_cli.main",
        "--url",
        stack.base_url,
        "--api-key",
        TEST_API_KEY,
        "mcp",
        "--agent-id",
        agent_id,
    ]


def stdio_server(stack: CliStack, agent_id: str) -> Client:
    command = server_command(stack, agent_id)
    return Client(StdioServerParameters(command=command[0], args=command[1:]))


def answer(result: CallToolResult) -> dict[str, Any]:
    assert not result.is_error, result.content
    assert isinstance(result.structured_content, dict)
    return result.structured_content


def error_text(result: CallToolResult) -> str:
    assert result.is_error, result.structured_content
    return " ".join(item.text for item in result.content if isinstance(item, TextContent))


def test_remember_then_recall_over_stdio_and_another_agent_sees_nothing(cli_stack: CliStack) -> None:
    agent, stranger = f"mcp-{uuid.uuid4().hex[:10]}", f"mcp-{uuid.uuid4().hex[:10]}"

    async def scenario() -> None:
        async with stdio_server(cli_stack, agent) as client:
            assert client.instructions is not None
            assert "recall" in client.instructions
            stored = answer(
                await client.call_tool(
                    "remember", {"message": "I work at Acme Corp as a nurse.", "speaker_name": "Ana", "wait": True}
                )
            )
            assert stored["status"] == "done"
            recalled = answer(await client.call_tool("recall", {"query": "Where does Ana work?"}))
            assert "Acme" in recalled["context"]
            assert any("Acme" in fact["fact_text"] for fact in recalled["facts"])
            assert "occurred_at" in error_text(
                await client.call_tool("remember", {"message": "x", "speaker_name": "Ana", "occurred_at": "soon"})
            )
        async with stdio_server(cli_stack, stranger) as client:
            recalled = answer(await client.call_tool("recall", {"query": "Where does Ana work?"}))
            assert "Acme" not in recalled["context"]
            assert answer(await client.call_tool("list_facts", {}))["total"] == 0

    anyio.run(scenario)


def _request(request_id: int, method: str, params: dict[str, Any]) -> bytes:
    return (json.dumps({"jsonrpc": "2.0", "id": request_id, "method": method, "params": params}) + "\n").encode()


_INITIALIZE = {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "test", "version": "1"}}


def _start(stack: CliStack, agent_id: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        server_command(stack, agent_id), stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )


def _read_answer(process: subprocess.Popen[bytes], request_id: int) -> dict[str, Any]:
    assert process.stdout is not None
    while True:
        line = process.stdout.readline()
        assert line, "the server closed its output"
        message = json.loads(line)
        if message.get("id") == request_id:
            return dict(message)


def test_the_stdio_server_survives_junk_and_exits_quietly_on_a_broken_pipe(cli_stack: CliStack) -> None:
    process = _start(cli_stack, f"mcp-{uuid.uuid4().hex[:10]}")
    assert process.stdin is not None
    assert process.stdout is not None
    try:
        process.stdin.write(_request(1, "initialize", _INITIALIZE))
        process.stdin.flush()
        assert _read_answer(process, 1)["result"]["serverInfo"]["name"] == "arandu-memory"
        process.stdin.write(b'{"jsonrpc": "2.0", "method": "notifications/initialized"}\n')
        # A line that is not JSON-RPC: the session goes on.
        process.stdin.write(b"this is not json\n")
        process.stdin.write(_request(2, "tools/list", {}))
        process.stdin.flush()
        tools = _read_answer(process, 2)["result"]["tools"]
        assert "recall" in {tool["name"] for tool in tools}

        # The client goes away while a call is in flight: its answer meets a closed pipe.
        process.stdout.close()
        process.stdin.write(_request(3, "tools/call", {"name": "list_facts", "arguments": {}}))
        process.stdin.flush()
        time.sleep(1.0)
        process.stdin.close()
        assert process.wait(timeout=20) == 0
        assert process.stderr is not None
        errors = process.stderr.read().decode()
        assert "Traceback" not in errors, errors
        assert "Exception ignored" not in errors, errors
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()


def test_the_stdio_server_needs_an_agent_id(cli_stack: CliStack) -> None:
    finished = subprocess.run(server_command(cli_stack, "x")[:-2], capture_output=True, timeout=60, check=False)
    assert finished.returncode != 0
    assert b"--agent-id" in finished.stderr
